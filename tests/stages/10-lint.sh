#!/usr/bin/env bash
# yamllint and ansible-lint (production profile): 0 violations.
set -euo pipefail
cd "$GPUHOST_ROOT"
export PATH=$GPUHOST_ROOT/.venv/bin:$PATH
yamllint -s .
ansible-lint --offline -q
# Role interfaces: defaults == argument_specs, generated role READMEs up to date (make role-docs).
python tests/lint/role_specs.py
# Every task of every role tagged <role> and <role>_<phase>, as Ansible sees it through imports and includes.
python tests/lint/role_tags.py
# No Jinja expression over 250 characters in roles/ and playbooks/ (a deciding one belongs in a tested filter).
python tests/lint/jinja_length.py
# No workstation paths, tracker references or local caches cited as sources in tracked files.
python tests/lint/public_refs.py
