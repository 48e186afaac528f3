#!/bin/sh
# Preflight of the kpsync role (tasks/preflight.yml). Ansible copies
# the role's binary module into its remote temp directory and executes it
# there; it copies this script into the same directory, and the role runs it
# through sh (ansible.builtin.script, executable: /bin/sh), which works even
# where that directory is mounted noexec. The script executes a file there,
# as Ansible will execute the module, and prints three lines:
#   exec | noexec   whether that worked
#   DIR             the remote temp directory (remote_tmp, or a system temp
#                   directory), where Ansible made this task's own directory
#   MOUNT           the mount it is on and its options (findmnt), or nothing
set -u
dir=$(cd "$(dirname "$0")" && pwd -P)
probe="${dir}/kube-proxy-sync-exec-probe"
printf '#!/bin/sh\nexit 0\n' >"${probe}" && chmod 0700 "${probe}"
if "${probe}" 2>/dev/null; then echo exec; else echo noexec; fi
rm -f "${probe}"
dirname "${dir}"
if command -v findmnt >/dev/null 2>&1; then
  findmnt -n -o TARGET,OPTIONS -T "${dir}" 2>/dev/null | head -n 1
fi
exit 0
