# gpuhost.sglang — entry points. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export GPUHOST_ROOT := $(CURDIR)

APT_PACKAGES := debootstrap systemd-container zstd iproute2 openssh-client rsync lxc python3-venv dpkg-dev gpg git make
SANDBOX_NAME := sandbox
SANDBOX_INDEX := 200
concurrency ?= 8

.PHONY: role-docs setup apt venv collections fixtures sandbox sandbox-host sandbox-deploy sandbox-bench sandbox-destroy test clean-hosts

## setup: Debian packages, the pinned controller toolchain (.venv) and the other collections (requirements/collections.txt)
setup: apt venv collections

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing: $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

venv: $(VENV)/.installed

$(VENV)/.installed: requirements/dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/dev.txt
	touch $@

collections: venv
	bash tests/fixtures/grafana-collection.sh

## fixtures: offline engine and router wheelhouses, controller engine venv, the tiny model, the Debian monitoring packages (cached under .cache/)
fixtures: setup
	bash tests/fixtures/wheelhouse.sh
	bash tests/fixtures/router-wheelhouse.sh
	bash tests/fixtures/engine-venv.sh
	bash tests/fixtures/tinymodel.sh
	bash tests/fixtures/monitoring-apt-repo.sh

## sandbox: README command 1 — set up, deploy to the local test host, benchmark it
sandbox: fixtures sandbox-host sandbox-deploy sandbox-bench

sandbox-host: setup
	$(PY) tests/hosts/testhost.py prepare
	$(PY) tests/hosts/testhost.py create $(SANDBOX_NAME) --index $(SANDBOX_INDEX) --bind-ro $(CURDIR)/.cache/wheelhouse:/opt/wheelhouse

sandbox-deploy:
	ansible-playbook playbooks/deploy.yml

sandbox-bench:
	ansible-playbook playbooks/bench.yml -e concurrency=$(concurrency)

sandbox-destroy:
	$(PY) tests/hosts/testhost.py destroy $(SANDBOX_NAME)

## test: README command 2 — every gate (lint, sanity, units, pytest, molecule, sandbox end to end)
test:
	tests/run-all.sh

## role-docs: regenerate roles/*/README.md from meta/argument_specs.yml (aar-doc; the lint stage fails when stale)
role-docs: venv
	$(PY) tests/lint/role_specs.py --fix-docs

## clean-hosts: every test host of ours (the sandbox, molecule's, the integration tests')
clean-hosts:
	$(PY) tests/hosts/testhost.py destroy --all
	GPUHOST_TESTHOST_TAG=it $(PY) tests/hosts/testhost.py destroy --all
	GPUHOST_TESTHOST_TAG=ir $(PY) tests/hosts/testhost.py destroy --all
	GPUHOST_TESTHOST_TAG=iu $(PY) tests/hosts/testhost.py destroy --all
	GPUHOST_TESTHOST_TAG=tt $(PY) tests/hosts/testhost.py destroy --all
	GPUHOST_TESTHOST_TAG=im $(PY) tests/hosts/testhost.py destroy --all
