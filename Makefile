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

.PHONY: role-docs setup apt venv collections fixtures fixtures-parser-venvs sandbox sandbox-host sandbox-deploy sandbox-bench sandbox-destroy test clean-hosts

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
# The steps that need nothing of each other run side by side (FIXTURE_JOBS at a time, each step's output printed
# whole when it ends, with its wall time: "fixtures: STEP Ns"): the downloads of the engine wheelhouse, the router
# wheelhouse and the monitoring packages; after the engine venv, the tiny model and (fixtures-parser-venvs, stage 20)
# SGLang's parser venvs, which link the engine venv's torch.
FIXTURE_JOBS ?= 3
FIXTURES := fixture-wheelhouse fixture-router fixture-engine-venv fixture-tinymodel fixture-monitoring
PARSER_VENVS := fixture-sglang-venv-0.5.23 fixture-sglang-venv-0.5.17
.PHONY: $(FIXTURES) $(PARSER_VENVS)
fixtures: setup
	@$(MAKE) --no-print-directory -j$(FIXTURE_JOBS) --output-sync=target $(FIXTURES)

## fixtures-parser-venvs: the fixtures and SGLang's parser venvs (0.5.23, the pinned release; 0.5.17, the one run on the H200)
fixtures-parser-venvs: setup
	@$(MAKE) --no-print-directory -j$(FIXTURE_JOBS) --output-sync=target $(FIXTURES) $(PARSER_VENVS)

timed = @t0=$$(date +%s) && $(2) && echo "fixtures: $(1) $$(( $$(date +%s) - t0 ))s"
fixture-wheelhouse:
	$(call timed,wheelhouse,bash tests/fixtures/wheelhouse.sh)
fixture-router:
	$(call timed,router-wheelhouse,bash tests/fixtures/router-wheelhouse.sh)
fixture-engine-venv: fixture-wheelhouse
	$(call timed,engine-venv,bash tests/fixtures/engine-venv.sh)
fixture-tinymodel: fixture-engine-venv
	$(call timed,tinymodel,bash tests/fixtures/tinymodel.sh)
fixture-monitoring:
	$(call timed,monitoring-apt-repo,bash tests/fixtures/monitoring-apt-repo.sh)
$(PARSER_VENVS): fixture-sglang-venv-%: fixture-engine-venv
	$(call timed,sglang-venv-$*,SGLANG_VERSION=$* bash tests/fixtures/sglang-venv.sh)

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
