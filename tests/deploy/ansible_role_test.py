#!/usr/bin/python3
"""deploy.ansible_role (kernel): deploy/ansible's role applied by Debian's ansible-playbook.

    ansible_role_test.py PLAYBOOK_DIR DEB VERSION JITTERCTL [HOSTS]

HOSTS (default 4) "hosts", each a network namespace with its own Debian sshd, joined to a client
namespace by a veth pair on 198.18.0.0/15: jta (198.18.i.1/24) in host i, the interface the fleet
shapes, and jac<i> (198.18.i.2/24) in the client's. ansible-playbook runs in the client namespace
and logs in to every host over real SSH with one key (port 2222).

Each host's sshd runs chrooted into an overlay of this system's "/" (read-only lower layer) whose
upper layer is a tmpfs of that host's own, in a mount namespace of its own (unshare -m): everything
Ansible does there (dpkg installing the package, /etc/jitterd, jitterd's process, /run) lands in
that host's tmpfs and vanishes with it, and the real root, in the bed the HOST machine's root over
9p, is never written (checked: its dpkg status and /etc/jitterd before and after). /proc, /sys (of
the host's network namespace), /dev, a fresh /run and /tmp are mounted in the chroot. Hosts have no
systemd, so the role runs jitterd as a plain process (its documented fallback).

The runs, each asserted on ansible's JSON output (ANSIBLE_STDOUT_CALLBACK=json) and on the hosts:
  1. one host's allowlist names an interface it does not have: refused, every host failed, nothing
     changed on any host (no package, no config, no jitterd, no qdisc);
  2. a profile that does not parse: refused the same way;
  3. the role: package installed (dpkg-query in each host's root), config written as asked (read
     back from the host's root), jitterd running there, and the fleet change made: tc in each
     host's namespace, the independent reader, shows netem with the profile's delay;
  4. the same again: changed=0 on every host;
  5. a phase change: only the fleet switch changes; tc shows the new delay.

Needs root, netem, overlayfs, sshd and ansible-playbook: the kernel suite (tests/vm/run); skips
(exit 77) and says why elsewhere.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
PORT = 2222  # not 22: never mistaken for a real sshd
LOW_MS, HIGH_MS = 5, 50  # the test profile's two phases' delays
# One playbook run's limit. The first run (package, config, jitterd, fleet change on 2 hosts) took
# 295 s in a guest alone on a host whose guests start a process in 43 ms (docs/testing.md, "Slower
# hosts"), and over 600 s there with two other guests of the kernel suite beside it.
PLAYBOOK_TIMEOUT_S = 1500


def skip(why):
    print(f"ansible_role_test: SKIP: {why}")
    sys.exit(SKIP)


class Failure(Exception):
    pass


def fail(why):
    raise Failure(why)


def run(argv, check=True, **kw):
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stdout}{done.stderr}")
    return done


def profile(name, low_ms, high_ms):
    return {
        "version": 1,
        "name": name,
        "description": "deploy.ansible_role: two constant delays (tests/deploy/ansible_role_test.py)",
        "phases": {
            "low": {"delay": {"latency": f"{low_ms}ms"}},
            "high": {"delay": {"latency": f"{high_ms}ms"}},
        },
    }


class Bed:
    """The namespaces, the veths and one sshd per host; torn down by close()."""

    def __init__(self, work, hosts):
        self.work = work
        self.prefix = f"jan{os.getpid()}"
        self.client = self.prefix + "c"
        self.hosts = [f"{self.prefix}h{i}" for i in range(hosts)]
        self.sshd = []
        run(["ip", "netns", "add", self.client])
        run(["ip", "-n", self.client, "link", "set", "lo", "up"])
        client_batch = []
        for i, ns in enumerate(self.hosts):
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "-batch", "-"], input=(
                f"link set lo up\nlink add jta type veth peer name jac{i} netns {self.client}\n"
                f"addr add 198.18.{i}.1/24 dev jta\nlink set jta up\n"))
            client_batch += [f"addr add 198.18.{i}.2/24 dev jac{i}", f"link set jac{i} up"]
        run(["ip", "-n", self.client, "-batch", "-"], input="\n".join(client_batch) + "\n")
        self.key = os.path.join(work, "client_key")
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key])

    def start_sshd(self, i):
        """sshd for host i, chrooted into its overlay root; returns when it listens."""
        ns = self.hosts[i]
        d = os.path.join(self.work, f"h{i}")
        seed = os.path.join(d, "seed")
        os.makedirs(os.path.join(seed, "etc/ssh/jitterd-test"))
        os.makedirs(os.path.join(d, "fs"))
        sshdir = os.path.join(seed, "etc/ssh/jitterd-test")
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(sshdir, "host_key")])
        shutil.copy(self.key + ".pub", os.path.join(sshdir, "authorized_keys"))
        with open(os.path.join(sshdir, "sshd_config"), "w") as f:
            f.write(
                f"Port {PORT}\nListenAddress 198.18.{i}.1\n"
                "HostKey /etc/ssh/jitterd-test/host_key\nPidFile none\n"
                "AuthorizedKeysFile /etc/ssh/jitterd-test/authorized_keys\nStrictModes no\nUsePAM no\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nLogLevel VERBOSE\n"
                "Subsystem sftp internal-sftp\n"
                "SetEnv PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
            )
        # root's shell /bin/sh: Debian's bash sources ~/.bashrc for sshd's commands, and this
        # machine's runs pyenv (seconds per login: tests/e2e/ssh_server.hpp).
        with open("/etc/passwd") as f:
            lines = [
                (ln[: ln.rfind(":") + 1] + "/bin/sh") if ln.startswith("root:") else ln
                for ln in f.read().splitlines()
            ]
        os.makedirs(os.path.join(seed, "etc"), exist_ok=True)
        with open(os.path.join(seed, "etc/passwd"), "w") as f:
            f.write("\n".join(lines) + "\n")
        fs = os.path.join(d, "fs")
        root = os.path.join(fs, "root")
        # man-db's trigger (the package has man pages) rebuilds the whole index, minutes in the bed;
        # Debian's switch for that (debconf man-db/auto-update) is this file, removed in the overlay.
        script = f"""set -e
mount -t tmpfs -o mode=0755 jitterd-ansible {fs}
mkdir {fs}/upper {fs}/work {root}
cp -a {seed}/. {fs}/upper/
mount -t overlay jitterd-ansible -o lowerdir=/,upperdir={fs}/upper,workdir={fs}/work {root}
# The overlay must hide its writes from the real root before anything runs in it.
touch {root}/.jitterd-ansible-probe-{i}
if [ -e /.jitterd-ansible-probe-{i} ]; then rm -f /.jitterd-ansible-probe-{i}; echo "overlay does not isolate"; exit 1; fi
mount -t proc proc {root}/proc
mount -t sysfs sysfs {root}/sys
mount --rbind /dev {root}/dev
mount -t tmpfs -o mode=0755 tmpfs {root}/run
mount -t tmpfs -o mode=1777 tmpfs {root}/tmp
# No package lists: python3-apt, which Ansible's apt module opens, then reads the installed packages
# alone (2.3 s in a guest against 7.8 s with this machine's lists), as on a host never `apt update`d.
mount -t tmpfs -o mode=0755 tmpfs {root}/var/lib/apt/lists
mkdir -p {root}/run/sshd
rm -f {root}/var/lib/man-db/auto-update
exec chroot {root} /usr/sbin/sshd -D -e -f /etc/ssh/jitterd-test/sshd_config
"""
        log = open(os.path.join(d, "sshd.log"), "w")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.sshd.append(proc)
        deadline = time.monotonic() + 30
        while "listening on" not in self.sshd_log(i):
            if proc.poll() is not None:
                raise RuntimeError(f"h{i}: sshd ended: {self.sshd_log(i)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"h{i}: sshd does not listen: {self.sshd_log(i)}")
            time.sleep(0.05)

    def sshd_log(self, i):
        with open(os.path.join(self.work, f"h{i}", "sshd.log")) as f:
            return f.read()

    def in_root(self, i, argv, check=False):
        """A command in host i's root and namespaces (sshd's mount namespace and root), as ssh would."""
        pid = str(self.sshd[i].pid)
        return run(["nsenter", "-t", pid, "-m", "-n", "-r", "-w", "--"] + argv, check=check)

    def netem_delay_ms(self, i):
        """The delay of a netem at jta's root, as tc in host i's namespace reads it; None without."""
        out = run(["ip", "netns", "exec", self.hosts[i], "tc", "-j", "qdisc", "show", "dev", "jta"]).stdout
        for q in json.loads(out):
            if q.get("root") and q.get("kind") == "netem":
                return round(q["options"]["delay"]["delay"] * 1000, 6)
        return None

    def close(self):
        # What the runs left in the namespaces: each host's jitterd (start-stop-daemon detaches it
        # from sshd's process group) and ssh's ControlPersist masters in the client's. By their ids,
        # as `ip netns pids` lists them; then the sshds.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = []
            for ns in self.hosts + [self.client]:
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
                left += [int(p) for p in pids.split() if p.isdigit()
                         and int(p) not in [s.pid for s in self.sshd]]
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while left and time.monotonic() < deadline:
                left = [p for p in left if os.path.exists(f"/proc/{p}")]
                time.sleep(0.1)
        for p in self.sshd:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for ns in self.hosts + [self.client]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Test:
    def __init__(self, playbook_dir, deb, version, jitterctl, hosts):
        self.playbook_dir = playbook_dir
        self.deb = deb
        self.version = version
        self.jitterctl = jitterctl
        self.n = hosts
        self.work = tempfile.mkdtemp(prefix="jitterd-ansible.")
        self.bed = None

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def inventory(self, name, group_vars, host_vars=None):
        host_vars = host_vars or {}
        lines = ["[jitterd]"]
        for i in range(self.n):
            # An INI host line is split as by a shell (shlex): the JSON in single quotes.
            extra = "".join(f" {k}='{json.dumps(v)}'" if not isinstance(v, str) else f" {k}={v}"
                            for k, v in host_vars.get(i, {}).items())
            lines.append(f"h{i} ansible_host=198.18.{i}.1 jitterd_fleet_interface=jta{extra}")
        lines.append("[jitterd:vars]")
        for k, v in group_vars.items():
            lines.append(f"{k}={v if isinstance(v, str) else json.dumps(v)}")
        return self.write(name, "\n".join(lines) + "\n")

    def group_vars(self, profiles, phase="low", allow=("jta",)):
        known_hosts = os.path.join(self.work, "known_hosts")
        ssh = (f"-F none -o IdentitiesOnly=yes -o UserKnownHostsFile={known_hosts}"
               " -o StrictHostKeyChecking=accept-new")
        return {
            "ansible_port": str(PORT),
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": self.bed.key,
            "ansible_ssh_common_args": f"'{ssh}'",
            "jitterd_deb": self.deb,
            "jitterd_allow_interfaces": list(allow),
            "jitterd_profiles": profiles,
            "jitterd_fleet_profile": "anstwo",
            "jitterd_fleet_phase": phase,
            "jitterd_controller_jitterctl": self.jitterctl,
            "jitterd_fleet_ssh": f"ssh -i {self.bed.key} {ssh}",
            "jitterd_fleet_inventory": os.path.join(self.work, "fleet.json"),
        }

    def playbook(self, label, inventory, extra=()):
        """ansible-playbook in the client namespace; returns (exit code, the json callback's report)."""
        # No ansible.cfg of this machine's user or of a checkout: HOME and the working folder are the
        # test's (only /etc/ansible/ansible.cfg could still apply; Debian ships none).
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update({
            "HOME": self.work,
            # The test's own JSON callback (ansible_callback/: ansible-core 2.14 has none).
            "ANSIBLE_CALLBACK_PLUGINS": os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "ansible_callback"),
            "ANSIBLE_STDOUT_CALLBACK": "jitterd_test_json",
            "ANSIBLE_LOCAL_TEMP": os.path.join(self.work, "ansible-tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": os.path.join(self.work, "cp"),
            "ANSIBLE_PIPELINING": "1",
            "ANSIBLE_FORKS": str(self.n),
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        })
        out_path = os.path.join(self.work, f"{label}.json")
        err_path = os.path.join(self.work, f"{label}.err")
        start = time.monotonic()
        # Output to files, not pipes: ssh's ControlPersist masters outlive ansible-playbook and would
        # hold a pipe open.
        with open(out_path, "w") as out, open(err_path, "w") as err:
            try:
                rc = subprocess.run(
                    ["ip", "netns", "exec", self.bed.client, "/usr/bin/ansible-playbook", "-i", inventory,
                     *extra, os.path.join(self.playbook_dir, "playbook.yml")],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=self.work,
                    timeout=PLAYBOOK_TIMEOUT_S).returncode
            except subprocess.TimeoutExpired:
                with open(err_path) as f:
                    fail(f"{label}: ansible-playbook did not finish within {PLAYBOOK_TIMEOUT_S} s and was killed "
                         f"(a slow or loaded host: docs/testing.md, \"Slower hosts\"); its stderr's end: "
                         f"{f.read()[-2000:]}")
        took = time.monotonic() - start
        with open(out_path) as f:
            text = f.read()
        try:
            report = json.loads(text[text.index("{"):])
        except ValueError:
            with open(err_path) as f:
                fail(f"{label}: ansible-playbook exit {rc}, no JSON report: {text}{f.read()}")
        stats = report.get("stats", {})
        print(f"== {label}: ansible-playbook exit {rc} in {took:.1f} s; recap "
              + ", ".join(f"{h} ok={s['ok']} changed={s['changed']} failed={s['failures']}"
                          for h, s in sorted(stats.items())))
        slow = sorted(report["tasks"], key=lambda t: -t["seconds"])[:6]
        print("   slowest: " + ", ".join(f"{t['task']} [{t['host']}] {t['seconds']} s" for t in slow))
        return rc, report

    def failed_tasks(self, report):
        """[(task name, host, message)] of every failed task result (a loop's items' included)."""
        out = []
        for t in report["tasks"]:
            if t["status"] in ("failed", "unreachable"):
                text = " ".join([t["msg"], t["stderr"], t["stdout"]] + [i["msg"] + " " + i["stderr"]
                                                          for i in t["items"] if i["failed"]])
                out.append((t["task"], t["host"], text))
        return out

    def changed_tasks(self, report):
        return [(t["task"], t["host"]) for t in report["tasks"] if t["changed"]]

    # Tasks of a role are reported as "ROLE : NAME".

    def assert_untouched(self, label):
        for i in range(self.n):
            status = self.bed.in_root(i, ["dpkg-query", "-W", "-f=${Status}", "jitterd"])
            if "installed" in status.stdout and "not-installed" not in status.stdout:
                fail(f"{label}: h{i}: jitterd installed after a refused run: {status.stdout}")
            if self.bed.in_root(i, ["test", "-e", "/etc/jitterd/config.json"]).returncode == 0:
                fail(f"{label}: h{i}: /etc/jitterd/config.json written after a refused run")
            if self.bed.in_root(i, ["test", "-e", "/var/cache/jitterd-ansible"]).returncode == 0:
                fail(f"{label}: h{i}: the package was copied after a refused run")
            if self.bed.netem_delay_ms(i) is not None:
                fail(f"{label}: h{i}: netem on jta after a refused run")
        print(f"   {label}: on every host no package, no config, no copy, no netem")

    def assert_refused(self, label, report, rc, task, words):
        stats = report["stats"]
        if rc == 0:
            fail(f"{label}: ansible-playbook succeeded")
        if sorted(stats) != [f"h{i}" for i in range(self.n)]:
            fail(f"{label}: recap hosts {sorted(stats)}")
        if any(s["changed"] != 0 for s in stats.values()):
            fail(f"{label}: something changed: {stats}; {self.changed_tasks(report)}")
        failed = self.failed_tasks(report)
        if not any(t == task and words in msg for t, _, msg in failed):
            fail(f"{label}: no failure of {task!r} saying {words!r}: {failed}")
        print(f"   {label}: refused by {task!r}: {[m for t, _, m in failed if t == task][0][:200]}")
        self.assert_untouched(label)

    def real_root_state(self):
        """What a write through to the real root would change: dpkg's status and /etc/jitterd."""
        return (run(["stat", "-c", "%s %Y", "/var/lib/dpkg/status"]).stdout,
                run(["sh", "-c", "ls -la /etc/jitterd 2>&1 || true"]).stdout)

    def main(self):
        self.bed = Bed(self.work, self.n)
        try:
            for i in range(self.n):
                self.bed.start_sshd(i)
            self.run_all()
        except Failure:
            for i in range(self.n):
                print(f"--- h{i}: jitterd's log\n"
                      + self.bed.in_root(i, ["cat", "/var/log/jitterd-ansible.log"]).stdout
                      + f"--- h{i}: sshd's log (its last 3000 characters)\n" + self.bed.sshd_log(i)[-3000:])
            raise
        finally:
            self.bed.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def run_all(self):
        real_before = self.real_root_state()
        good = self.write("anstwo.json", json.dumps(profile("anstwo", LOW_MS, HIGH_MS), indent=2))
        bad_profile = profile("ansbad", LOW_MS, HIGH_MS)
        bad_profile["phases"]["low"]["delay"]["latency"] = "-5ms"
        bad = self.write("ansbad.json", json.dumps(bad_profile, indent=2))

        # 1. One host's allowlist names an interface it lacks.
        inv = self.inventory("bad-interface.ini", self.group_vars([good]),
                             {self.n - 1: {"jitterd_allow_interfaces": ["jta", "jtz9"]}})
        rc, report = self.playbook("bad interface", inv)
        self.assert_refused("bad interface", report, rc, "jitterd : Nothing asked for is missing",
                            f"h{self.n - 1}: /sys/class/net/jtz9 does not exist")

        # 2. A profile that does not parse.
        inv = self.inventory("bad-profile.ini", self.group_vars([good, bad]))
        rc, report = self.playbook("bad profile", inv)
        self.assert_refused("bad profile", report, rc,
                            "jitterd : Every profile parses (jitterctl inspect, on the controller)", "latency")

        # 3. The role.
        inv = self.inventory("good.ini", self.group_vars([good]))
        rc, report = self.playbook("first run", inv)
        if rc != 0:
            fail(f"first run: exit {rc}: {self.failed_tasks(report)}")
        for h, s in report["stats"].items():
            if s["failures"] or s.get("unreachable") or s["changed"] == 0:
                fail(f"first run: {h}: {s}")
        changed = self.changed_tasks(report)
        if ("jitterd : Fleet apply (every host at one deadline, or none)", "h0") not in changed:
            fail(f"first run: no fleet apply among the changed tasks: {changed}")
        self.check_hosts("first run", LOW_MS)

        # 4. Again: nothing changes.
        rc, report = self.playbook("second run", inv)
        if rc != 0:
            fail(f"second run: exit {rc}: {self.failed_tasks(report)}")
        for h, s in report["stats"].items():
            if s["changed"] != 0 or s["failures"]:
                fail(f"second run: {h}: {s}; changed tasks {self.changed_tasks(report)}")
        # The installed version matched: no copy, no apt (the slow part, ~30 s per host here).
        installs = [(t["host"], t["status"]) for t in report["tasks"]
                    if t["task"] == "jitterd : The package installed"]
        if len(installs) != self.n or any(status != "skipped" for _, status in installs):
            fail(f"second run: the package's installation was not skipped on every host: {installs}")
        print("   second run: changed=0 on every host, the installation skipped")
        self.check_hosts("second run", LOW_MS)

        # 5. Another phase, the fleet's part alone (--tags jitterd_fleet, as a harness moving phases
        # would run it; run 4 showed the rest changes nothing): only the fleet switch changes.
        inv = self.inventory("high.ini", self.group_vars([good], phase="high"))
        rc, report = self.playbook("phase high", inv, ("--tags", "jitterd_fleet"))
        if rc != 0:
            fail(f"phase high: exit {rc}: {self.failed_tasks(report)}")
        changed = self.changed_tasks(report)
        if changed != [("jitterd : Fleet switch (every host at one deadline, or none)", "h0")]:
            fail(f"phase high: changed tasks {changed}, expected only the fleet switch")
        ran = sorted({t["task"] for t in report["tasks"] if t["status"] != "skipped"})
        fleet_tasks = {"jitterd : This host's entry in the fleet inventory", "jitterd : The fleet",
                       "jitterd : The fleet inventory (jitterctl fleet --inventory)",
                       "jitterd : The fleet's state (jitterctl fleet --json status)",
                       "jitterd : What the fleet needs",
                       "jitterd : Fleet switch (every host at one deadline, or none)"}
        if set(ran) - fleet_tasks:
            fail(f"phase high: --tags jitterd_fleet ran tasks outside the fleet's part: {sorted(set(ran) - fleet_tasks)}")
        print(f"   phase high (--tags jitterd_fleet): the only change: {changed}; ran only {ran}")
        self.check_hosts("phase high", HIGH_MS)

        real_after = self.real_root_state()
        if real_before != real_after:
            fail(f"the real root changed: {real_before} -> {real_after}")
        print("   the real root's dpkg status and /etc/jitterd are as before")

    def check_hosts(self, label, delay_ms):
        with open(os.path.join(self.work, "anstwo.json")) as f:
            want_profile = f.read()
        for i in range(self.n):
            q = self.bed.in_root(i, ["dpkg-query", "-W", "-f=${Status}|${Version}", "jitterd"])
            if q.stdout != f"install ok installed|{self.version}":
                fail(f"{label}: h{i}: dpkg-query: {q.stdout}{q.stderr}")
            cfg = self.bed.in_root(i, ["cat", "/etc/jitterd/config.json"])
            config = json.loads(cfg.stdout)
            if config["interfaces"]["allow"] != ["jta"] or config["socket"]["group"] != "jitterd":
                fail(f"{label}: h{i}: config {config}")
            if self.bed.in_root(i, ["cat", "/etc/jitterd/profiles/anstwo.json"]).stdout != want_profile:
                fail(f"{label}: h{i}: /etc/jitterd/profiles/anstwo.json is not the controller's")
            pid = self.bed.in_root(i, ["cat", "/run/jitterd-ansible.pid"]).stdout.strip()
            exe = self.bed.in_root(i, ["readlink", f"/proc/{pid}/exe"]).stdout.strip() if pid else ""
            if exe != "/usr/sbin/jitterd":
                fail(f"{label}: h{i}: pid file {pid!r}, its program {exe!r}")
            got = self.bed.netem_delay_ms(i)
            if got != delay_ms:
                log = self.bed.in_root(i, ["cat", "/var/log/jitterd-ansible.log"]).stdout
                fail(f"{label}: h{i}: tc reads netem delay {got} ms on jta, expected {delay_ms}: {log}")
        print(f"   {label}: every host: jitterd {self.version} installed, config allows [jta], profile "
              f"copied, /usr/sbin/jitterd running (pid file), tc: netem {delay_ms} ms on jta")


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    playbook_dir, deb, version, jitterctl = sys.argv[1:5]
    hosts = int(sys.argv[5]) if len(sys.argv) == 6 else 4
    sys.stdout.reconfigure(line_buffering=True)  # progress as it happens, under ctest too
    os.environ["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if os.geteuid() != 0:
        skip("needs root (the kernel suite: scripts/test, or tests/vm/run)")
    if not os.access("/usr/bin/ansible-playbook", os.X_OK):
        skip("/usr/bin/ansible-playbook is not installed (scripts/setup installs ansible-core)")
    for tool in ("/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"):
        if not os.access(tool, os.X_OK):
            skip(f"{tool} is not installed (scripts/setup installs openssh-server/-client)")
    if run(["/usr/bin/python3", "-c", "import apt"], check=False).returncode != 0:
        skip("Debian's python3-apt is not installed (the role's apt module needs it)")
    probe = run(["unshare", "--net", "sh", "-c", "ip link set lo up && tc qdisc add dev lo root netem"],
                check=False)
    if probe.returncode != 0:
        skip(f"this kernel ({os.uname().release}) has no netem (run it in the VM test bed: tests/vm/run)")
    installed = run(["dpkg-query", "-W", "-f=${Status}", "jitterd"], check=False).stdout
    if installed.endswith(" installed"):
        skip("jitterd is installed on this system; the hosts' roots are overlays of it")
    if not os.path.isfile(deb):
        fail(f"no package at {deb} (cmake --build BUILD --target deb)")
    try:
        Test(os.path.abspath(playbook_dir), os.path.abspath(deb), version, os.path.abspath(jitterctl),
             hosts).main()
    except Failure as e:
        print(f"ansible_role_test: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print("ansible_role_test: PASS")


if __name__ == "__main__":
    main()
