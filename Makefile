# gpuhost.sglang — entry points. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

APT_PACKAGES := debootstrap systemd-container zstd iproute2 openssh-client rsync lxc python3-venv

.PHONY: setup apt venv test sandbox clean-hosts

setup: apt venv

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing: $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

venv: $(VENV)/.installed

$(VENV)/.installed: requirements/dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/dev.txt
	touch $@

# Every gate: lint, sanity, units, pytest, molecule, sandbox end to end.
test:
	tests/run-all.sh

clean-hosts:
	$(PY) tests/hosts/testhost.py destroy --all
