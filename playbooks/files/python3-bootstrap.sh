# Sent by playbooks/host.yml through ansible.builtin.raw (which needs no Python on the target) to a container that
# may be fresh from a Proxmox template: the modules of Ansible need python3 there. Idempotent: with a python3 that runs,
# it changes nothing and says "present"; without one it installs the python3 of Debian and says "installed"; a failed
# install exits non-zero (the task fails).
if python3 -c 'import sys' >/dev/null 2>&1; then
  echo "gpuhost-python3: present"
else
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 >/dev/null && echo "gpuhost-python3: installed"
fi
