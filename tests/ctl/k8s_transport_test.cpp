// jitterctl --host k8s://NODE: the URL, the kubectl command lines, the pod list read from
// `kubectl get pods -o json` and the pod chosen from it; and ControlClient over a fake kubectl (a
// shell script standing in for it: it answers `get pods` from a fixture and runs `exec`'s command
// after "--" here, as the pod would) in front of a fake jitterd. The real jitterd behind a fake
// kubectl is tests/deploy/k8s_transport_test.py's; no cluster is reachable here.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "child_transport.hpp"
#include "control_client.hpp"
#include "fake_jitterd.hpp"
#include "host_url_error.hpp"
#include "k8s_pods.hpp"
#include "options.hpp"
#include "remote_host.hpp"

namespace jitterctl {
namespace {

using testing::FakeJitterd;
using Json = nlohmann::json;
using namespace std::chrono_literals;

// ---- URLs and command lines ---------------------------------------------------------------------

TEST(K8sUrl, ReadsNodeAndSocket) {
  const RemoteHost r = parse_host_url("k8s://node-a.lab/run/jitterd/other.sock");
  EXPECT_EQ(r.transport, Transport::kKubernetes);
  EXPECT_EQ(r.host, "node-a.lab");
  EXPECT_EQ(r.socket_path, "/run/jitterd/other.sock");
  EXPECT_EQ(r.user, "");
  EXPECT_FALSE(r.port);
  EXPECT_EQ(r.url(), "k8s://node-a.lab/run/jitterd/other.sock");
  const RemoteHost bare = parse_host_url("k8s://worker-3");
  EXPECT_EQ(bare.host, "worker-3");
  EXPECT_EQ(bare.socket_path, "");
  EXPECT_EQ(bare.url(), "k8s://worker-3");
  EXPECT_EQ(parse_host_url("ssh://lab").transport, Transport::kSsh);
}

TEST(K8sUrl, RefusesWhatIsNotANodeNameSayingWhy) {
  EXPECT_EQ(testing::host_url_error("k8s://"),
            "--host \"k8s://\": which node? give k8s://NODE[/socket]");
  EXPECT_EQ(testing::host_url_error("k8s://root@node-a"),
            "--host \"k8s://root@node-a\": a user or port means nothing to kubectl exec; give "
            "k8s://NODE[/socket]");
  EXPECT_NE(testing::host_url_error("k8s://node-a:10250").find("a user or port"),
            std::string::npos);
  EXPECT_EQ(testing::host_url_error("k8s://Node_A"),
            "--host \"k8s://Node_A\": \"Node_A\" is not a Kubernetes node name (lower-case "
            "letters, digits, '-' and '.', at most 253; as `kubectl get nodes` lists them)");
  for (const char* bad : {"k8s://-node", "k8s://node-", "k8s://a..b", "k8s://.a", "k8s://a b",
                          "k8s://a;rm", "k8s://a$(x)"}) {
    EXPECT_NE(testing::host_url_error(bad).find("not a Kubernetes node name"), std::string::npos)
        << bad;
  }
  EXPECT_NE(testing::host_url_error("k8s://node-a/x.sock?namespace=a").find("no query"),
            std::string::npos);
  EXPECT_NE(testing::host_url_error("k8s://node-a#x").find("no query"), std::string::npos);
  EXPECT_NE(testing::host_url_error("tcp://x").find("or k8s://NODE[/socket/path]"),
            std::string::npos);
}

TEST(K8sUrl, Dns1123Subdomain) {
  EXPECT_TRUE(is_dns1123_subdomain("a"));
  EXPECT_TRUE(is_dns1123_subdomain("ip-10-0-1-17.eu-west-1.compute.internal"));
  EXPECT_TRUE(is_dns1123_subdomain(std::string(253, 'a')));
  EXPECT_FALSE(is_dns1123_subdomain(std::string(254, 'a')));
  EXPECT_FALSE(is_dns1123_subdomain(""));
  EXPECT_FALSE(is_dns1123_subdomain("a."));
  EXPECT_FALSE(is_dns1123_subdomain("A"));
  EXPECT_FALSE(is_dns1123_subdomain("a_b"));
  EXPECT_NO_THROW(check_k8s_namespace("jitterd"));
  EXPECT_THROW(check_k8s_namespace("a.b"), UsageError);
  EXPECT_THROW(check_k8s_namespace(std::string(64, 'a')), UsageError);
  EXPECT_THROW(check_k8s_namespace("--all-namespaces"), UsageError);
}

TEST(K8sUrl, KubectlArgvHasNoShellAnywhere) {
  RemoteCommands commands;
  commands.kubectl = kubectl_command_words("kubectl  --context lab");
  commands.k8s_namespace = "chaos";
  const RemoteHost r = parse_host_url("k8s://node-a/tmp/it's.sock");
  EXPECT_EQ(kubectl_get_pods_argv(r, commands),
            (std::vector<std::string>{
                "kubectl", "--context", "lab", "get", "pods", "--namespace", "chaos", "--selector",
                "app.kubernetes.io/name=jitterd", "--field-selector",
                "spec.nodeName=node-a,status.phase=Running", "--output", "json"}));
  // The path is one argv word: no quoting, since no shell reads it.
  EXPECT_EQ(
      kubectl_exec_argv(r, commands, "jitterd-7xk2p"),
      (std::vector<std::string>{"kubectl", "--context", "lab", "exec", "--stdin", "--namespace",
                                "chaos", "--container", "jitterd", "jitterd-7xk2p", "--",
                                "jitterctl", "proxy", "--socket", "/tmp/it's.sock"}));
  EXPECT_EQ(kubectl_exec_argv(parse_host_url("k8s://n"), RemoteCommands{}, "p"),
            (std::vector<std::string>{"kubectl", "exec", "--stdin", "--namespace", "jitterd",
                                      "--container", "jitterd", "p", "--", "jitterctl", "proxy"}));
  EXPECT_EQ(kubectl_command_words(nullptr), std::vector<std::string>{"kubectl"});
  EXPECT_EQ(k8s_namespace_of(nullptr), "jitterd");
  EXPECT_EQ(k8s_namespace_of(""), "jitterd");
  EXPECT_EQ(k8s_namespace_of("lab"), "lab");
  EXPECT_EQ(command_line_for_people({"kubectl", "exec", "--socket", "/tmp/it's.sock", "a b"}),
            "kubectl exec --socket '/tmp/it'\\''s.sock' 'a b'");
}

// ---- The pod list
// --------------------------------------------------------------------------------

// One item as `kubectl get pods -o json` prints it (kubectl 1.32 against a v1.30 API server,
// trimmed to the fields read and a few beside them that must be ignored).
Json pod_item(const std::string& name, const std::string& created, bool ready,
              bool terminating = false, const std::string& phase = "Running") {
  Json item = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "jitterd"},
        {"creationTimestamp", created},
        {"labels", {{"app.kubernetes.io/name", "jitterd"}}}}},
      {"spec", {{"nodeName", "node-a"}}},
      {"status",
       {{"phase", phase},
        {"conditions", Json::array({{{"type", "Initialized"}, {"status", "True"}},
                                    {{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
  if (terminating) item["metadata"]["deletionTimestamp"] = "2026-12-05T14:00:30Z";
  return item;
}

std::string pod_list(const Json& items) {
  return Json{
      {"apiVersion", "v1"}, {"kind", "List"}, {"items", items}, {"metadata", Json::object()}}
      .dump(4);
}

TEST(K8sPods, ReadsTheFieldsTheChoiceNeeds) {
  const RemoteHost r = parse_host_url("k8s://node-a");
  const auto pods = read_pod_list(
      r, pod_list(Json::array({pod_item("jitterd-old", "2026-12-01T09:00:00Z", true, true),
                               pod_item("jitterd-new", "2026-12-05T14:00:00Z", false)})));
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].name, "jitterd-old");
  EXPECT_EQ(pods[0].created, "2026-12-01T09:00:00Z");
  EXPECT_TRUE(pods[0].ready);
  EXPECT_TRUE(pods[0].terminating);
  EXPECT_EQ(pods[0].phase, "Running");
  EXPECT_FALSE(pods[1].ready);
  EXPECT_FALSE(pods[1].terminating);
  EXPECT_TRUE(read_pod_list(r, pod_list(Json::array())).empty());
}

TEST(K8sPods, WhatIsNotAPodListIsAConnectError) {
  const RemoteHost r = parse_host_url("k8s://node-a");
  for (const char* text : {"", "jitterd-7xk2p", "[]", R"({"items": 3})", "{\"items\": ["}) {
    try {
      read_pod_list(r, text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConnectError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot reach jitterd on k8s://node-a: kubectl get pods "
                                           "printed no pod list"),
                std::string::npos)
          << e.what();
    }
  }
  // A name that is not a Kubernetes name would become an option of kubectl exec.
  EXPECT_THROW(read_pod_list(r, pod_list(Json::array({pod_item("--all", "t", true)}))),
               ConnectError);
}

TEST(K8sPods, TheNewestReadyPodWinsAndTheChoiceIsSaid) {
  const RemoteHost r = parse_host_url("k8s://node-a");
  const RemoteCommands commands;
  const std::vector<JitterdPod> one{{"jitterd-a", "2026-12-05T10:00:00Z", true, false, "Running"}};
  EXPECT_EQ(choose_pod(r, commands, one).pod, "jitterd-a");
  EXPECT_EQ(choose_pod(r, commands, one).note, "") << "one Ready pod: nothing to say";

  // A rolling update: the old pod terminating, a newer one Ready, the newest not Ready yet.
  const std::vector<JitterdPod> rolling{
      {"jitterd-old", "2026-12-05T10:00:00Z", true, true, "Running"},
      {"jitterd-mid", "2026-12-05T11:00:00Z", true, false, "Running"},
      {"jitterd-new", "2026-12-05T12:00:00Z", false, false, "Running"},
      {"jitterd-gone", "2026-12-05T13:00:00Z", true, false, "Succeeded"}};
  const PodChoice c = choose_pod(r, commands, rolling);
  EXPECT_EQ(c.pod, "jitterd-mid");
  EXPECT_EQ(c.note,
            "k8s://node-a: 3 Running jitterd pods on node node-a (a rolling update?): using "
            "jitterd-mid, the newest Ready one, created 2026-12-05T11:00:00Z; not jitterd-old "
            "(terminating, created 2026-12-05T10:00:00Z), jitterd-new (not Ready, created "
            "2026-12-05T12:00:00Z)");

  const std::vector<JitterdPod> two_ready{
      {"jitterd-b", "2026-12-05T12:00:00Z", true, false, "Running"},
      {"jitterd-a", "2026-12-05T10:00:00Z", true, false, "Running"}};
  EXPECT_EQ(choose_pod(r, commands, two_ready).pod, "jitterd-b") << "the newest";

  const std::vector<JitterdPod> unready{
      {"jitterd-a", "2026-12-05T10:00:00Z", false, false, "Running"}};
  EXPECT_EQ(choose_pod(r, commands, unready).note,
            "k8s://node-a: pod jitterd-a is not Ready (no better one on the node)");
}

TEST(K8sPods, NoRunningPodNamesNodeNamespaceSelectorAndTheCommandToLook) {
  RemoteCommands commands;
  commands.kubectl = {"kubectl", "--context", "lab"};
  commands.k8s_namespace = "chaos";
  try {
    choose_pod(parse_host_url("k8s://node-b"), commands,
               {{"jitterd-x", "2026-12-05T10:00:00Z", false, false, "Pending"}});
    FAIL() << "chose a pod";
  } catch (const ConnectError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot reach jitterd on k8s://node-b: no Running jitterd pod on node node-b in "
                 "namespace chaos (selector app.kubernetes.io/name=jitterd) — is jitterd deployed "
                 "there (docs/operations.md, \"Kubernetes\"), and is the node's name right? look "
                 "with: kubectl --context lab get pods --namespace chaos --selector "
                 "app.kubernetes.io/name=jitterd --output wide");
  }
}

// ---- ControlClient over a fake kubectl
// -----------------------------------------------------------

// A script standing in for kubectl: every call's arguments go to <dir>/calls (one line each), then
// a leading "--context NAME" is passed over;
// `get` prints <dir>/pods.json (or fails the way `body_get` says); `exec` runs the words after "--"
// with the built jitterctl first in PATH, then, like kubectl, says "command terminated with exit
// code N" when the command failed.
class FakeKubectl {
 public:
  explicit FakeKubectl(const std::string& body_get = "cat \"$dir/pods.json\"") {
    const std::string ctl_dir =
        std::string(JITTERCTL_BINARY).substr(0, std::string(JITTERCTL_BINARY).rfind('/'));
    std::ofstream script(path());
    script << "#!/bin/sh\ndir=" << dir_.path() << "\necho \"$*\" >> \"$dir/calls\"\n"
           << "[ \"$1\" = --context ] && shift 2\n"
           << "case $1 in\n"
           << "  get) " << body_get << " ;;\n"
           << "  exec) while [ \"$1\" != -- ]; do shift; done; shift\n"
           << "    PATH=" << ctl_dir << ":$PATH \"$@\"; code=$?\n"
           << "    [ $code -eq 0 ] || echo \"command terminated with exit code $code\" >&2\n"
           << "    exit $code ;;\n"
           << "esac\n";
    script.close();
    ::chmod(path().c_str(), 0755);
  }
  std::string path() const { return dir_.path() + "/kubectl"; }
  void set_pods(const Json& items) const { dir_.write("pods.json", pod_list(items)); }
  ClientOptions options(const std::string& url, std::vector<std::string>* notes = nullptr) const {
    ClientOptions options;
    options.remote = parse_host_url(url);
    options.commands.kubectl = {path(), "--context", "lab"};
    options.timeout = 5s;
    if (notes) options.note = [notes](const std::string& line) { notes->push_back(line); };
    return options;
  }
  std::string calls() const {
    std::ifstream in(dir_.path() + "/calls");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  test_support::TempDir dir_{"jitterctl-fake-kubectl-"};
};

TEST(K8sTransport, EveryCallGoesThroughKubectlExecIntoTheNodesPod) {
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, {{"done", true}}); });
  const FakeKubectl kubectl;
  kubectl.set_pods(Json::array({pod_item("jitterd-7xk2p", "2026-12-05T10:00:00Z", true)}));
  std::vector<std::string> notes;
  {
    ControlClient client =
        ControlClient::connect(kubectl.options("k8s://node-a" + server.socket_path(), &notes));
    EXPECT_EQ(client.endpoint(), "k8s://node-a" + server.socket_path());
    for (const char* method : {"status", "apply", "clear"}) {
      const Reply reply = client.call(method, {{"interface", "veth0"}});
      ASSERT_TRUE(reply.ok) << method;
      EXPECT_EQ(reply.result, Json({{"done", true}}));
    }
  }
  EXPECT_TRUE(notes.empty());
  ASSERT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(server.requests()[1].at("method"), "apply");
  EXPECT_EQ(kubectl.calls(),
            "--context lab get pods --namespace jitterd --selector app.kubernetes.io/name=jitterd "
            "--field-selector spec.nodeName=node-a,status.phase=Running --output json\n"
            "--context lab exec --stdin --namespace jitterd --container jitterd jitterd-7xk2p -- "
            "jitterctl proxy --socket " +
                server.socket_path() + "\n");
}

TEST(K8sTransport, TwoPodsOnTheNodeTakeTheNewestReadyAndSaySo) {
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, Json::object()); });
  const FakeKubectl kubectl;
  kubectl.set_pods(Json::array({pod_item("jitterd-old", "2026-12-05T10:00:00Z", true, true),
                                pod_item("jitterd-new", "2026-12-05T11:00:00Z", true)}));
  std::vector<std::string> notes;
  {
    ControlClient client =
        ControlClient::connect(kubectl.options("k8s://node-a" + server.socket_path(), &notes));
    ASSERT_TRUE(client.call("status", Json::object()).ok);
  }
  EXPECT_NE(kubectl.calls().find("--container jitterd jitterd-new -- "), std::string::npos)
      << kubectl.calls();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2 Running jitterd pods on node node-a (a rolling update?): using "
                          "jitterd-new, the newest Ready one"),
            std::string::npos)
      << notes[0];
}

std::string connect_failure(const ClientOptions& options) {
  try {
    ControlClient client = ControlClient::connect(options);
    client.call("status", Json::object());
  } catch (const ConnectError& e) {
    return e.what();
  }
  return "(no ConnectError)";
}

TEST(K8sTransport, NoRunningPodIsSaidBeforeAnyExec) {
  const FakeKubectl kubectl;
  kubectl.set_pods(Json::array());
  const std::string message = connect_failure(kubectl.options("k8s://node-b"));
  EXPECT_NE(message.find("cannot reach jitterd on k8s://node-b: no Running jitterd pod on node "
                         "node-b in namespace jitterd (selector app.kubernetes.io/name=jitterd)"),
            std::string::npos)
      << message;
  EXPECT_EQ(kubectl.calls().find("exec"), std::string::npos) << kubectl.calls();
}

TEST(K8sTransport, KubectlsOwnFailuresQuoteItsLastLine) {
  const FakeKubectl refused(
      "echo 'error: You must be logged in to the server (Unauthorized)' >&2; exit 1");
  EXPECT_EQ(connect_failure(refused.options("k8s://node-a")),
            "cannot reach jitterd on k8s://node-a: kubectl get pods failed (exit code 1): error: "
            "You must be logged in to the server (Unauthorized); check with: " +
                refused.path() +
                " --context lab get pods --namespace jitterd --selector "
                "app.kubernetes.io/name=jitterd --field-selector "
                "spec.nodeName=node-a,status.phase=Running --output json");
  const FakeKubectl garbled("echo jitterd-7xk2p");
  EXPECT_NE(
      connect_failure(garbled.options("k8s://node-a")).find("kubectl get pods printed no pod list"),
      std::string::npos);
}

TEST(K8sTransport, TheProxysFailureInThePodIsQuotedNotKubectlsExitLine) {
  const FakeKubectl kubectl;
  kubectl.set_pods(Json::array({pod_item("jitterd-7xk2p", "2026-12-05T10:00:00Z", true)}));
  const test_support::TempDir dir("jitterctl-k8s-");
  EXPECT_EQ(connect_failure(kubectl.options("k8s://node-a" + dir.path() + "/none.sock")),
            "cannot reach jitterd on k8s://node-a" + dir.path() +
                "/none.sock: the jitterctl proxy in pod jitterd-7xk2p on node node-a could not "
                "reach jitterd: jitterctl proxy: cannot connect to jitterd at " +
                dir.path() +
                "/none.sock: No such file or directory — is jitterd running? (systemctl start "
                "jitterd, or --socket PATH)");
}

TEST(K8sTransport, KubectlExecRefusedSaysHowToCheck) {
  // The exec refused by RBAC: kubectl's own error, exit 1.
  const FakeKubectl kubectl;
  kubectl.set_pods(Json::array({pod_item("jitterd-7xk2p", "2026-12-05T10:00:00Z", true)}));
  const RemoteHost r = parse_host_url("k8s://node-a");
  const ChildCommand command = kubectl_child_command(r, RemoteCommands{}, "jitterd-7xk2p");
  EXPECT_EQ(kubectl_failure_message(r, command, 1 << 8,
                                    "Error from server (Forbidden): pods \"jitterd-7xk2p\" is "
                                    "forbidden: User \"dev\" cannot create resource \"pods/exec\""),
            "cannot reach jitterd on k8s://node-a: kubectl exec into pod jitterd-7xk2p on node "
            "node-a failed (exit code 1): Error from server (Forbidden): pods \"jitterd-7xk2p\" is "
            "forbidden: User \"dev\" cannot create resource \"pods/exec\" — your Kubernetes user "
            "needs \"create\" on pods/exec in the namespace; check with: kubectl exec --stdin "
            "--namespace jitterd --container jitterd jitterd-7xk2p -- jitterctl proxy </dev/null");
  EXPECT_NE(kubectl_failure_message(r, command, 126 << 8,
                                    "exec: \"jitterctl\": executable file not found in $PATH")
                .find("jitterctl was not found in pod jitterd-7xk2p on node node-a"),
            std::string::npos);
}

TEST(K8sTransport, KubectlThatCannotRunIsAConnectError) {
  ClientOptions options;
  options.remote = parse_host_url("k8s://node-a");
  options.commands.kubectl = {"/nonexistent/kubectl"};
  EXPECT_EQ(connect_failure(options),
            "cannot reach jitterd on k8s://node-a: cannot run \"/nonexistent/kubectl\": No such "
            "file or directory — install kubectl, or name the kubectl command in $JITTERD_KUBECTL");
}

}  // namespace
}  // namespace jitterctl
