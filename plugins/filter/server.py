# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing the tested command-line and profile logic to templates and tasks.

server_argv      options dict -> argv list (optionally pre-checked against flags.yml data)
systemd_exec     argv list -> one ExecStart= value (systemd quoting, %% and $$)
shell_quote      argv list -> POSIX shell string (display only)
sglang_profile   (gpu arch, model family, engine version, profile data[, overrides]) -> options dict
sglang_profile_details  same arguments -> {options, evidence, environment, matched, notes, fallbacks, arch, ...}
sglang_candidates  (profile fallbacks, host fallback chain, host options) -> the ordered candidate option mappings
sglang_option_sets (candidates, profile options, host options, managed options[, default options]) -> each candidate's
                   options as the engine gets them (defaults < profile < sglang_options < candidate < managed)
sglang_managed_options (engine data, listen address, port, model path, model name, replica's options) -> the options
                   the role sets itself (the managed layer)
sglang_exposure    (listen address, port, engine's public path prefixes, api key set[, supported]) -> {warning, ...}
sglang_fallback_budget  (candidates, ready timeout, budget, last-known-good record, chain) -> {worst_case_seconds, line, error}
sglang_learned_chain  (candidates, profile lessons, host options, host lessons) -> every option set the chain can run
                   after what earlier failures taught ({position, learned, lessons, options})
sglang_replica_phases  (replica group) -> the phases of a multi-node replica's deploy, in order
served_files_changed  (serving_unit inspect files before, after) -> a sentence per file changed or missing
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

profiles = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles")
exposure_ = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.exposure")
budget = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.fallback_budget")
unit_host = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.serving.unit_host")
args = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args")
deploy = LazyModule("ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy")


def server_argv(options, negatable=None, flag_data=None, engine_version=None, var_name="options"):
    """Render options; with ``flag_data`` (one engine's entry of sglang_flags) reject renamed,
    removed and known-abbreviated names first, all at once, and take ``negatable`` from its data for
    ``engine_version`` when not given."""
    try:
        if flag_data:
            if not isinstance(flag_data, dict):
                raise args.OptionsError("flag_data must be one engine's entry of sglang_flags (a dict with renames, removed, abbreviations)")
            errors = args.precheck(options, flag_data.get("renames"), flag_data.get("removed"),
                                   flag_data.get("abbreviations"), engine_version, var_name)
            if errors:
                raise args.OptionsError("%s: %s" % (var_name, "; ".join(e["text"] for e in errors)))
            if negatable is None:
                negatable = args.negatable_for(flag_data.get("negatable"), engine_version)
        return args.server_argv(options, negatable or (), var_name)
    except args.OptionsError as exc:
        raise AnsibleFilterError(str(exc))


def systemd_exec(argv):
    try:
        return args.systemd_exec(argv)
    except args.OptionsError as exc:
        raise AnsibleFilterError(str(exc))


def shell_quote(argv):
    if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("shell_quote expects a list of arguments, got %s" % type(argv).__name__)
    return args.shell_quote(argv)


def sglang_profile_details(gpu_arch, model_family, engine_version, data, overrides=None, engine="sglang"):
    try:
        return profiles.select_profile(gpu_arch, model_family, engine_version, data, overrides, engine)
    except (profiles.ProfileError, args.OptionsError) as exc:
        raise AnsibleFilterError(str(exc))


def sglang_profile(gpu_arch, model_family, engine_version, data, overrides=None, engine="sglang"):
    return sglang_profile_details(gpu_arch, model_family, engine_version, data, overrides, engine)["options"]


def sglang_candidates(profile_fallbacks, fallback_chain, host_options=None):
    try:
        return profiles.candidate_chain(profile_fallbacks, fallback_chain, host_options)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc))


def sglang_learned_chain(candidates, lessons=None, host_options=None, host_lessons=None):
    try:
        return profiles.learned_chain(candidates, lessons, host_options, host_lessons)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc))


def sglang_option_sets(candidates, profile_options=None, host_options=None, managed_options=None, default_options=None):
    try:
        return profiles.option_sets(candidates, profile_options, host_options, managed_options, default_options)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc))


def sglang_managed_options(engine, listen_address, port, model_path, model_name="", replica_options=None):
    try:
        return profiles.managed_options(engine, listen_address, port, model_path, model_name, replica_options)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("sglang_managed_options: %s" % exc)


def sglang_exposure(listen_address, port, public_path_prefixes, api_key_set, api_key_supported=True):
    try:
        return exposure_.exposure(listen_address, port, public_path_prefixes, bool(api_key_set), bool(api_key_supported))
    except exposure_.ExposureError as exc:
        raise AnsibleFilterError(str(exc))


def sglang_fallback_budget(candidates, ready_timeout, budget_seconds, lkg_meta=None, chain=True):
    try:
        return budget.fallback_budget(candidates, ready_timeout, budget_seconds, lkg_meta, bool(chain))
    except budget.BudgetError as exc:
        raise AnsibleFilterError(str(exc))


def served_files_changed(before, after):
    """serving_unit inspect's ``files`` before and after: one sentence per file that differs or is missing."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise AnsibleFilterError("served_files_changed expects serving_unit inspect's files mappings, got %s and %s"
                                 % (type(before).__name__, type(after).__name__))
    return unit_host.files_changed(before, after)


def sglang_replica_phases(group):
    """The phases a multi-node replica ``group`` deploys in, in order (deploy.py REPLICA_PHASES: the one list)."""
    return list(deploy.REPLICA_PHASES)


def json_record(text):
    """A small JSON record as host_read returned its text (last-known-good's meta.json, the install stamp): the
    object, or {} when the file is absent or damaged (the deploy transaction names the damage; here it only means
    no record)."""
    return unit_host.parse_record(text, "")[0]


class FilterModule(object):
    def filters(self):
        return {
            "server_argv": server_argv,
            "systemd_exec": systemd_exec,
            "shell_quote": shell_quote,
            "sglang_profile": sglang_profile,
            "sglang_profile_details": sglang_profile_details,
            "sglang_candidates": sglang_candidates,
            "sglang_learned_chain": sglang_learned_chain,
            "sglang_option_sets": sglang_option_sets,
            "sglang_managed_options": sglang_managed_options,
            "sglang_exposure": sglang_exposure,
            "sglang_fallback_budget": sglang_fallback_budget,
            "json_record": json_record,
            "sglang_replica_phases": sglang_replica_phases,
            "served_files_changed": served_files_changed,
        }
