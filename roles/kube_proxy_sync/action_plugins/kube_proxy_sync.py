# Action plugin: run the kube-proxy-sync binary module built for the target's
# platform (kube_proxy_sync_linux_amd64 or kube_proxy_sync_linux_arm64).
#
# Ansible picks a module by its name, and a task's module name cannot be
# templated. This plugin reads the target's `uname -sm` and runs the matching
# binary module, so the role needs one task (one result, one `changed`, the
# module's own check and diff handling) instead of one task per architecture.
from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import module_loader

ARCHES = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
}

# Options of this plugin only; everything else goes to the binary unchanged.
PLUGIN_OPTIONS = ("module_dir",)


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        module_args = dict(self._task.args)
        module_dir = module_args.pop("module_dir", None)
        for name in PLUGIN_OPTIONS:
            module_args.pop(name, None)

        uname = self._low_level_execute_command("uname -sm")
        if uname.get("rc") != 0:
            raise AnsibleActionFail(
                "kube_proxy_sync: cannot read the target's OS and architecture with `uname -sm`: "
                + (uname.get("stderr") or uname.get("stdout") or "no output").strip()
            )
        fields = uname.get("stdout", "").split()
        system, machine = (fields + ["", ""])[:2]
        if system != "Linux" or machine not in ARCHES:
            raise AnsibleActionFail(
                f"kube_proxy_sync: unsupported target {system or '?'}/{machine or '?'}: "
                "the binary module is built for Linux x86_64 (amd64) and aarch64 (arm64) only"
            )

        module_name = f"kube_proxy_sync_linux_{ARCHES[machine]}"
        if module_dir:
            module_loader.add_directory(module_dir)
        if not module_loader.has_plugin(module_name):
            raise AnsibleActionFail(
                f"kube_proxy_sync: binary module {module_name} not found"
                + (f" in {module_dir}" if module_dir else "")
                + ": build it with `make dist` (it installs roles/kube_proxy_sync/library/kube_proxy_sync_linux_<arch>)"
            )

        result.update(
            self._execute_module(
                module_name=module_name,
                module_args=module_args,
                task_vars=task_vars,
                wrap_async=False,
            )
        )
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
