#!/usr/bin/python3
"""Offline checks of deploy/kubernetes (no cluster is reachable where this runs, and none is asked).

For each kustomization (base, targets): `kubectl kustomize` builds it, every object it yields is checked
against the Kubernetes API schema as the Python client's generated models carry it (python3-kubernetes:
one class per API object, with `openapi_types` and `attribute_map`, generated from Kubernetes' OpenAPI
spec): unknown fields, wrong types, missing required fields (a model's constructor refuses None for a
required one). Then what jitterd needs of it: the ConfigMap's config passes `jitterd --check-config`, the
capabilities are exactly the systemd unit's (systemd/jitterd.service, plus systemd/jitterd-targets.conf
for targets), the socket and the ledger are on a hostPath, the probes ask the configured socket.

The checker is shown to fail: misspelled, mistyped and missing fields planted in the built objects, and
a misspelled config key, must each be reported.

usage: kubernetes_manifests_test.py SOURCE_DIR JITTERD
Exit 0: passed; 1: failed (each problem printed); 77: skipped (the reason printed).
"""

import copy
import grp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

# Where python3-kubernetes is Debian's (the PATH's python3 may be another one without it).
try:
    import yaml
    import kubernetes.client as k8s_models
except ImportError as e:
    print(f"SKIP: the Kubernetes API models are missing ({e}): apt-get install python3-kubernetes "
          "(scripts/setup), and run this with Debian's /usr/bin/python3")
    sys.exit(SKIP)

VARIANTS = {
    # kustomization folder: the systemd files whose CapabilityBoundingSet= lines it must match
    "base": ["systemd/jitterd.service"],
    "targets": ["systemd/jitterd.service", "systemd/jitterd-targets.conf"],
}

# The DaemonSet's image until an overlay names the real one (no registry holds a jitterd image).
PLACEHOLDER_IMAGE = "registry.invalid/jitterd:0.1.0"

PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (float, int)}


def model_class(api_version, kind):
    """The model class of an API object: apps/v1 DaemonSet -> V1DaemonSet, v1 ConfigMap -> V1ConfigMap."""
    version = api_version.split("/")[-1]
    return getattr(k8s_models, version[0].upper() + version[1:] + kind, None)


def check_value(value, type_name, where, problems):
    """Checks one value against an openapi_types entry ('str', 'list[V1Container]', 'dict(str, str)',
    'V1PodSpec', 'object'), appending 'where: what' to problems."""
    if value is None:
        return
    if type_name == "object":  # int-or-string and free-form fields: any JSON value
        return
    if type_name in PRIMITIVES:
        # bool is an int in Python; an int field given true/false is still wrong
        if not isinstance(value, PRIMITIVES[type_name]) or (type_name != "bool" and isinstance(value, bool)):
            problems.append(f"{where}: expected {type_name}, found {type(value).__name__} {value!r}")
        return
    if type_name == "datetime":
        if not isinstance(value, str):
            problems.append(f"{where}: expected a timestamp string, found {value!r}")
        return
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, found {type(value).__name__}")
            return
        for i, item in enumerate(value):
            check_value(item, m.group(1), f"{where}[{i}]", problems)
        return
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a map, found {type(value).__name__}")
            return
        for key, item in value.items():
            check_value(item, m.group(1), f"{where}.{key}", problems)
        return
    cls = getattr(k8s_models, type_name, None)
    assert cls is not None, f"the models have no {type_name} (named at {where})"
    check_object(value, cls, where, problems)


def check_object(obj, cls, where, problems):
    """Checks a mapping against a model class: every field known and of its type, every required one
    present (the class's constructor raises ValueError on a required field left None)."""
    if not isinstance(obj, dict):
        problems.append(f"{where}: expected an object ({cls.__name__}), found {type(obj).__name__}")
        return
    by_json_name = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    for key, value in obj.items():
        attr = by_json_name.get(key)
        if attr is None:
            problems.append(f"{where}.{key}: unknown field of {cls.__name__}")
            continue
        check_value(value, cls.openapi_types[attr], f"{where}.{key}", problems)
    present = {by_json_name[k]: v for k, v in obj.items() if k in by_json_name}
    try:
        cls(**present)
    except ValueError as e:
        problems.append(f"{where}: {cls.__name__}: {e}")


def check_api_object(obj, problems):
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    cls = model_class(obj.get("apiVersion", ""), obj.get("kind", ""))
    if cls is None:
        problems.append(f"{where}: no model for apiVersion {obj.get('apiVersion')!r} kind {obj.get('kind')!r}")
        return
    check_object(obj, cls, where, problems)


def schema_problems(objects):
    problems = []
    for obj in objects:
        check_api_object(obj, problems)
    return problems


def kustomize(kubectl, folder):
    run = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed:\n{run.stderr}")
    return [o for o in yaml.safe_load_all(run.stdout) if o is not None]


def unit_capabilities(source, files):
    """The capabilities the systemd unit (and drop-in) give jitterd, as Kubernetes names them."""
    caps = set()
    for f in files:
        with open(os.path.join(source, f)) as unit:
            for line in unit:
                if m := re.fullmatch(r"CapabilityBoundingSet=(.*)", line.strip()):
                    caps |= {c.removeprefix("CAP_") for c in m.group(1).split()}
    assert caps, f"no CapabilityBoundingSet= in {files}"
    return caps


def check_config(jitterd, config_text, where):
    """Runs `jitterd --check-config` on the ConfigMap's config; returns the problems it reports. The
    socket.group the image provides (jitterd, from the .deb) need not exist here: where it does not,
    the config is checked with this process's group in its place, everything else unchanged."""
    config = json.loads(config_text)
    problems = []
    group = config.get("socket", {}).get("group")
    if group != "jitterd":
        problems.append(f"{where}: socket.group is {group!r}; the image's group (from the .deb) is jitterd")
    try:
        grp.getgrnam("jitterd")
    except KeyError:
        config["socket"]["group"] = grp.getgrgid(os.getgid()).gr_name
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as out:
            json.dump(config, out)
        run = subprocess.run([jitterd, "--config", path, "--check-config"], capture_output=True, text=True,
                             timeout=60)
    if run.returncode != 0:
        problems.append(f"{where}: jitterd --check-config exit {run.returncode}:\n{run.stderr}{run.stdout}")
    return problems


def the_one(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


# The CRI sockets jitterd probes when targets.cri_sockets is not set (default_cri_sockets()).
CRI_SOCKETS = ["/run/containerd/containerd.sock", "/run/k3s/containerd/containerd.sock", "/run/crio/crio.sock"]


def mounted_host_path(pod, container, path):
    """The hostPath of the volume mounted at a folder holding path, or None."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if os.path.dirname(path) == mount["mountPath"].rstrip("/") and "hostPath" in volumes[mount["name"]]:
            return volumes[mount["name"]]["hostPath"]["path"]
    return None


def jitterd_problems(objects, variant, source, jitterd):
    """What jitterd needs of the built objects, beyond the API schema."""
    problems = []
    daemonset = the_one(objects, "DaemonSet")
    config_map = the_one(objects, "ConfigMap")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    where = f"{variant}: DaemonSet {daemonset['metadata']['name']}"

    config_text = config_map["data"]["config.json"]
    problems += check_config(jitterd, config_text, f"{variant}: ConfigMap {config_map['metadata']['name']}")
    config = json.loads(config_text)
    # kustomize reads no file outside the kustomization's folder, so the shipped config is copied
    # there; the copy must not drift from it (targets/ adds only the targets it allows).
    with open(os.path.join(source, "systemd/config.json")) as f:
        shipped = json.load(f)
    if {k: v for k, v in config.items() if k != "targets"} != shipped:
        problems.append(f"{variant}: the ConfigMap's config differs from systemd/config.json beyond targets")

    # The config file jitterd is told to read is the ConfigMap's.
    command = container["command"]
    config_path = command[command.index("--config") + 1]
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_mounts = [m for m in container["volumeMounts"] if "configMap" in volumes[m["name"]]]
    if not any(m["mountPath"] == config_path and m.get("subPath") == "config.json" and
               volumes[m["name"]]["configMap"]["name"] == config_map["metadata"]["name"] for m in config_mounts):
        problems.append(f"{where}: --config {config_path} is not the ConfigMap's config.json")

    # The socket (for harnesses on the node) and the ledger (which must outlive the pod) on the node.
    for key, path in (("socket.path", config["socket"]["path"]), ("state_dir", config["state_dir"] + "/x")):
        if mounted_host_path(pod, container, path) is None:
            problems.append(f"{where}: {key} ({path}) is not in a hostPath folder")
    for probe in ("readinessProbe", "livenessProbe"):
        argv = container[probe]["exec"]["command"]
        if argv[argv.index("--socket") + 1] != config["socket"]["path"]:
            problems.append(f"{where}: {probe} asks another socket than {config['socket']['path']}")

    security = container["securityContext"]
    expected = unit_capabilities(source, VARIANTS[variant])
    added = set(security["capabilities"].get("add", []))
    if added != expected or security["capabilities"].get("drop") != ["ALL"]:
        problems.append(f"{where}: capabilities add {sorted(added)} drop {security['capabilities'].get('drop')}; "
                        f"the systemd unit's are {sorted(expected)} (and drop ALL)")
    if security.get("privileged") is not False or security.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: must be privileged: false and allowPrivilegeEscalation: false")
    if pod.get("hostNetwork") is not True:
        problems.append(f"{where}: hostNetwork must be true (host-side veths are in the node's namespace)")
    # hostPID only where targets are allowed: `--pid` names the node's PIDs.
    if bool(pod.get("hostPID")) != (variant == "targets"):
        problems.append(f"{where}: hostPID is {pod.get('hostPID')}; only targets needs it")
    if variant == "targets":
        if config.get("targets", {}).get("allow", []) == []:
            problems.append(f"{where}: the config allows no targets")
        if mounted_host_path(pod, container, "/run/netns/x") != "/run/netns":
            problems.append(f"{where}: /run/netns of the node is not mounted (--netns, --netns-path)")
        # --pod: the CRI sockets jitterd probes by default (daemon/pod_target.cpp), each in a
        # mounted folder of the node's, writable (connecting to a socket needs write access).
        if not any(p.startswith("pod:") for p in config.get("targets", {}).get("allow", [])):
            problems.append(f"{where}: the config allows no pod: pattern (--pod)")
        mounts = {m["mountPath"].rstrip("/"): m for m in container.get("volumeMounts", [])}
        for socket in CRI_SOCKETS:
            folder = os.path.dirname(socket)
            if mounted_host_path(pod, container, socket) != folder:
                problems.append(f"{where}: {folder} of the node is not mounted (--pod's CRI socket {socket})")
            elif mounts[folder].get("readOnly"):
                problems.append(f"{where}: {folder} is mounted read-only; connecting to {socket} needs write access")
    if container["image"] != PLACEHOLDER_IMAGE:
        problems.append(f"{where}: image {container['image']}, expected the placeholder {PLACEHOLDER_IMAGE}")
    return problems


def image_override_problems(kubectl, folder):
    """An overlay's `images:` entry, as docs/operations.md shows it, must replace the placeholder."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as out:
            # kustomize refuses an absolute path here
            yaml.safe_dump({"resources": [os.path.relpath(folder, tmp)],
                            "images": [{"name": PLACEHOLDER_IMAGE.split(":")[0], "newName": "registry.example/jitterd",
                                        "newTag": "0.1.1"}]}, out)
        daemonset = the_one(kustomize(kubectl, tmp), "DaemonSet")
    image = daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    return [] if image == "registry.example/jitterd:0.1.1" else [f"an images: override left {image}"]


def planted_faults_are_caught(objects, jitterd):
    """The checker must see faults planted in a correct build: returns the faults it missed."""
    daemonset = the_one(objects, "DaemonSet")
    missed = []

    def expect(name, mutate, pattern):
        broken = copy.deepcopy(daemonset)
        mutate(broken)
        problems = schema_problems([broken])
        if not any(re.search(pattern, p) for p in problems):
            missed.append(f"{name}: no problem matching {pattern!r} in {problems}")

    pod = lambda d: d["spec"]["template"]["spec"]  # noqa: E731
    expect("misspelled field", lambda d: pod(d).update(hostNetwrok=True),
           r"spec\.template\.spec\.hostNetwrok: unknown field of V1PodSpec")
    expect("misspelled nested field",
           lambda d: pod(d)["containers"][0]["securityContext"].update(readOnlyRootFilesytem=True),
           r"containers\[0\]\.securityContext\.readOnlyRootFilesytem: unknown field")
    expect("wrong type", lambda d: pod(d).update(terminationGracePeriodSeconds="30"),
           r"terminationGracePeriodSeconds: expected int, found str")
    expect("bool for int", lambda d: pod(d)["containers"][0]["livenessProbe"].update(periodSeconds=True),
           r"periodSeconds: expected int, found bool")
    expect("missing required field", lambda d: pod(d)["containers"][0].pop("name"),
           r"containers\[0\]: V1Container: Invalid value for `name`, must not be `None`")
    expect("map for list", lambda d: pod(d).update(volumes={"name": "run"}),
           r"spec\.template\.spec\.volumes: expected a list")

    config_map = copy.deepcopy(the_one(objects, "ConfigMap"))
    config = json.loads(config_map["data"]["config.json"])
    config["interface"] = config.pop("interfaces")
    if not check_config(jitterd, json.dumps(config), "planted"):
        missed.append("misspelled config key: jitterd --check-config accepted it")
    return missed


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    source, jitterd = sys.argv[1], sys.argv[2]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl is missing (apt-get install kubernetes-client: scripts/setup); "
              "`kubectl kustomize` builds the manifests offline")
        return SKIP
    failures = []
    for variant in VARIANTS:
        folder = os.path.join(source, "deploy/kubernetes", variant)
        objects = kustomize(kubectl, folder)
        kinds = sorted(o["kind"] for o in objects)
        if kinds != ["ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]:
            failures.append(f"{variant}: built {kinds}")
        failures += [f"{variant}: {p}" for p in schema_problems(objects)]
        failures += jitterd_problems(objects, variant, source, jitterd)
        failures += [f"{variant}: {p}" for p in image_override_problems(kubectl, folder)]
        failures += [f"{variant}: checker: {m}" for m in planted_faults_are_caught(objects, jitterd)]
        print(f"{variant}: {len(objects)} objects built by {kubectl} and checked")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
