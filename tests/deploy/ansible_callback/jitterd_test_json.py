# A stdout callback for tests/deploy/ansible_role_test.py: every task result and the recap as one
# JSON document, so that the test asserts on what Ansible reported, not on its screen text.
# Written for the test because ansible-core 2.14 (Debian 12) has no JSON callback of its own (the
# "json" one is in the ansible.posix collection, Debian's much larger `ansible` package).
#
#   {"tasks": [{"task", "host", "status": ok|failed|skipped|unreachable, "changed", "msg",
#               "stderr", "stdout" (its first 4000 characters), "seconds" (from the task's start),
#               "items": [{"failed", "msg", "stderr"}]}],
#    "stats": {HOST: {"ok", "changed", "failures", "unreachable", "skipped", "rescued", "ignored"}}}
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
    name: jitterd_test_json
    type: stdout
    short_description: task results and the recap as one JSON document (jitterd's tests)
    description:
        - Printed at the end of the run.
"""

import json
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "jitterd_test_json"

    def __init__(self, display=None):
        super(CallbackModule, self).__init__(display)
        self.tasks = []
        self.task_started = time.monotonic()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.task_started = time.monotonic()

    def v2_playbook_on_handler_task_start(self, task):
        self.task_started = time.monotonic()

    def _record(self, result, status):
        r = result._result
        self.tasks.append({
            "task": result._task.get_name(),
            "host": result._host.get_name(),
            "status": status,
            "changed": bool(r.get("changed", False)),
            "msg": str(r.get("msg", "")),
            "stderr": str(r.get("stderr", "")),
            "stdout": str(r.get("stdout", ""))[:4000],
            # From the task's start to this host's result (the hosts run side by side).
            "seconds": round(time.monotonic() - self.task_started, 2),
            "items": [{"failed": bool(i.get("failed", False)), "msg": str(i.get("msg", "")),
                       "stderr": str(i.get("stderr", ""))} for i in r.get("results", [])
                      if isinstance(i, dict)],
        })

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        report = {"tasks": self.tasks,
                  "stats": {h: stats.summarize(h) for h in sorted(stats.processed.keys())}}
        self._display.display(json.dumps(report, indent=1, default=str))
