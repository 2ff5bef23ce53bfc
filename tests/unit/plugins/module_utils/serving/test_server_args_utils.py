from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import shlex
import shutil
import subprocess

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import (
    OptionsError, classify, flag_rules, format_error, normalize_name, parse_version, precheck, reverse_renames, server_argv,
    shell_quote, split_argv, suggested_argv, systemd_exec, systemd_quote, version_in_range)


# ------------------------------------------------------------------ server_argv

def test_value_kinds_render_as_documented():
    argv = server_argv({
        "tp-size": 8,
        "--mem-fraction-static": 0.92,
        "disable-shared-experts-fusion": True,
        "enable-metrics": False,
        "api-key": None,
        "cuda-graph-bs-decode": [1, 2, 4],
        "json-model-override-args": {"b": 1, "a": [1, "x"]},
        "served-model-name": "glm 5",
    })
    assert argv == [
        "--cuda-graph-bs-decode", "1", "2", "4",
        "--disable-shared-experts-fusion",
        "--json-model-override-args", '{"a":[1,"x"],"b":1}',
        "--mem-fraction-static", "0.92",
        "--served-model-name", "glm 5",
        "--tp-size", "8",
    ]


def test_order_is_stable_whatever_the_insertion_order():
    a = {"tp-size": 8, "mem-fraction-static": 0.92, "max-running-requests": 64}
    b = dict(reversed(list(a.items())))
    assert server_argv(a) == server_argv(b)
    assert server_argv(a)[0] == "--max-running-requests"


def test_false_becomes_no_flag_only_for_negatable_options():
    opts = {"enable-dsa-fused-indexer": False, "enable-metrics": False, "x": None}
    assert server_argv(opts) == []
    assert server_argv(opts, negatable=["enable-dsa-fused-indexer"]) == ["--no-enable-dsa-fused-indexer"]
    assert server_argv({"enable-dsa-fused-indexer": True}, negatable=["enable-dsa-fused-indexer"]) == ["--enable-dsa-fused-indexer"]


def test_underscores_and_dashes_are_normalized():
    assert server_argv({"mem_fraction_static": 0.5}) == ["--mem-fraction-static", "0.5"]
    assert normalize_name("--tp_size") == "tp-size"


def test_empty_list_is_omitted_and_floats_keep_precision():
    assert server_argv({"cuda-graph-bs-decode": []}) == []
    assert server_argv({"x": 1e-05}) == ["--x", "1e-05"]
    assert server_argv({"x": 0.1 + 0.2}) == ["--x", repr(0.1 + 0.2)]


@pytest.mark.parametrize("options,needle", [
    ({"-tp": 8}, "invalid option name '-tp'"),
    ({"--": 1}, "invalid option name"),
    ({"tp size": 8}, "invalid option name"),
    ({"x": [[1]]}, "options.x: unsupported value"),
    ({"x": [True]}, "booleans are only allowed as the whole value"),
    ({"x": object()}, "unsupported value"),
    ({"tp-size": 1, "tp_size": 2}, "given twice"),
])
def test_bad_options_fail_with_the_variable_name(options, needle):
    with pytest.raises(OptionsError) as exc:
        server_argv(options)
    assert needle in str(exc.value)


def test_options_must_be_a_dict():
    with pytest.raises(OptionsError, match="options must be a dict"):
        server_argv(["--tp", "8"])
    with pytest.raises(OptionsError, match="sglang_options must be a dict"):
        server_argv("--tp 8", var_name="sglang_options")
    assert server_argv(None) == []


def test_split_argv():
    argv = ["serve", "/m", "--tp-size", "8", "--x", "-1", "--flag", "--bs", "1", "2"]
    assert split_argv(argv) == [["serve", "/m"], ["--tp-size", "8"], ["--x", "-1"], ["--flag"], ["--bs", "1", "2"]]


# ------------------------------------------------------------------ systemd quoting

_C_ESC = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", '"': '"', "'": "'", "s": " "}


def systemd_split(line):
    """Independent reader of systemd.service(5) command lines: words, quotes, C escapes, %% and $$."""
    words, i, n = [], 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word, quoted = [], None
        while i < n:
            c = line[i]
            if quoted is None and c in " \t":
                break
            if c in "\"'" and quoted is None:
                quoted = c
            elif c == quoted:
                quoted = None
            elif c == "\\":
                nxt = line[i + 1]
                if nxt == "x":
                    word.append(chr(int(line[i + 2:i + 4], 16)))
                    i += 3
                elif nxt in _C_ESC:
                    word.append(_C_ESC[nxt])
                    i += 1
                else:
                    raise AssertionError("unknown escape \\%s in %r" % (nxt, line))
            else:
                word.append(c)
            i += 1
        assert quoted is None, "unbalanced quote in %r" % line
        w = "".join(word)
        assert not re.search(r"(?<!%)%(?!%)", w.replace("%%", "")), "unescaped specifier in %r" % w
        words.append(w.replace("%%", "%").replace("$$", "$"))
    return words


TRICKY = ["/opt/venv/bin/python", "-m", "sglang.launch_server", "--served-model-name", "glm 5 \"nvfp4\"",
          "--json-model-override-args", '{"rope":{"factor":2.0},"name":"a b"}', "100%", "$HOME", "${X}",
          "back\\slash", "new\nline", "tab\there", ";", "", "it's", "\x01ctl", "é-ünïcode", "a=b,c:d/e@f+g"]


def test_systemd_exec_roundtrips_through_an_independent_reader():
    line = systemd_exec(TRICKY)
    assert systemd_split(line) == TRICKY


def test_systemd_exec_escapes_specifiers_and_variables():
    assert systemd_quote("100%") == "100%%"
    assert systemd_quote("$HOME") == "$$HOME"
    assert systemd_quote("plain-arg_1.0") == "plain-arg_1.0"
    assert systemd_quote(";") == '";"'
    assert systemd_quote("") == '""'
    assert systemd_quote('a "b"') == '"a \\"b\\""'
    assert systemd_exec(["/bin/x", 8, 0.92]) == "/bin/x 8 0.92"


@pytest.mark.parametrize("bad,needle", [
    ("/bin/x --a", "expects a list"),
    ([], "empty argv"),
    (["-/bin/x"], "systemd prefix"),
    (["/bin/x", {"a": 1}], "not a scalar"),
    (["/bin/x", "a\x00b"], "NUL byte"),
])
def test_systemd_exec_rejects_bad_input(bad, needle):
    with pytest.raises(OptionsError, match=re.escape(needle)):
        systemd_exec(bad)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_analyze_accepts_the_rendered_line(tmp_path):
    unit = tmp_path / "gpuhost-quote-test.service"
    unit.write_text("[Unit]\nDescription=quoting test\n[Service]\nType=oneshot\nExecStart=%s\n" % systemd_exec(["/bin/true"] + TRICKY[1:]))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    problems = [ln for ln in (proc.stderr + proc.stdout).splitlines() if unit.name in ln]
    assert problems == [], problems
    # and a line with a bad escape IS reported, so the check above can fail
    unit.write_text("[Unit]\nDescription=x\n[Service]\nType=oneshot\nExecStart=/bin/true \"a\\qb\"\n")
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert "escape" in (proc.stderr + proc.stdout)


def test_shell_quote_roundtrips():
    assert shlex.split(shell_quote(TRICKY)) == TRICKY


# ------------------------------------------------------------------ versions and data

@pytest.mark.parametrize("a,b", [
    ("0.5.22", "0.5.23"), ("0.5.9", "0.5.10"), ("0.5.15", "0.5.15.post1"), ("0.5.15rc1", "0.5.15"),
    ("0.5.23.dev1", "0.5.23"), ("0.5", "0.5.1"), ("v0.5.15.post1", "0.5.16"),
])
def test_parse_version_orders(a, b):
    assert parse_version(a) < parse_version(b)


def test_parse_version_equal_padding_and_garbage():
    assert parse_version("0.5") == parse_version("0.5.0")
    with pytest.raises(OptionsError, match="cannot parse version"):
        parse_version("nightly")


def test_version_in_range_bounds():
    assert version_in_range("0.5.23", "0.5.23", None)
    assert not version_in_range("0.5.22", "0.5.23", None)
    assert not version_in_range("0.5.23", None, "0.5.23")
    assert version_in_range("0.5.22", None, "0.5.23")
    assert version_in_range("1.0", None, None)


RENAMES = [{"old": "nsa-decode-backend", "new": "dsa-decode-backend", "since": "0.5.23", "evidence": "e1"},
           {"old": "old-only", "new": "newer", "until": "0.5.0"}]


def test_flag_rules_filters_by_version():
    ren, rem = flag_rules(RENAMES, [{"option": "enable-nan-detection", "since": "0.5.23"}], "0.5.23")
    assert list(ren) == ["nsa-decode-backend"] and list(rem) == ["enable-nan-detection"]
    ren, rem = flag_rules(RENAMES, [{"option": "enable-nan-detection", "since": "0.5.23"}], "0.5.20")
    assert ren == {} and rem == {}
    ren = flag_rules({"--a_b": "c"}, None, "1.0")[0]
    assert ren["a-b"]["new"] == "c"


def test_reverse_renames_only_before_the_rename():
    rev = reverse_renames(RENAMES, "0.5.20")
    assert list(rev) == ["dsa-decode-backend"] and rev["dsa-decode-backend"]["new"] == "nsa-decode-backend"
    assert reverse_renames(RENAMES, "0.5.23") == {}
    assert reverse_renames({"a": "b"}, "0.1") == {}


@pytest.mark.parametrize("renames,removed,needle", [
    ([{"old": "a"}], None, "renames[0] must be a dict with keys old, new"),
    (["a"], None, "renames[0]"),
    (None, [{"replacement": "x"}], "removed[0] must be a dict with key option"),
])
def test_flag_rules_rejects_malformed_data(renames, removed, needle):
    with pytest.raises(OptionsError, match=re.escape(needle)):
        flag_rules(renames, removed, "0.5.23")


def test_precheck_finds_renames_removed_and_abbreviations_at_once():
    errs = precheck({"nsa-decode-backend": "trtllm", "tp": 8, "enable-nan-detection": True, "tp-size": 8},
                    RENAMES, [{"option": "enable-nan-detection", "since": "0.5.23", "replacement": "none"}],
                    {"tp": "tp-size"}, "0.5.23")
    by = {e["option"]: e for e in errs}
    assert by["nsa-decode-backend"]["problem"] == "renamed" and by["nsa-decode-backend"]["replacement"] == "dsa-decode-backend"
    assert by["tp"]["problem"] == "abbreviation" and by["tp"]["replacement"] == "tp-size"
    assert by["enable-nan-detection"]["problem"] == "removed"
    assert "tp-size" not in by
    assert precheck({"nsa-decode-backend": "trtllm"}, RENAMES, None, None, "0.5.20") == []


# ------------------------------------------------------------------ classify (parser results -> verdicts)

def _meta():
    def o(canonical, choices=None, kind="_StoreAction", negatable=False):
        return {"canonical": canonical, "kind": kind, "nargs": None, "choices": choices, "deprecated": False, "negatable": negatable}
    opts = {
        "--model-path": o("--model-path"), "--model": o("--model-path"),
        "--tp-size": o("--tp-size"), "--tensor-parallel-size": o("--tp-size"),
        "--mem-fraction-static": o("--mem-fraction-static"),
        "--dsa-decode-backend": o("--dsa-decode-backend", ["fa3", "trtllm"]),
        "--cuda-graph-max-bs-decode": o("--cuda-graph-max-bs-decode"),
        "--cuda-graph-max-bs-prefill": o("--cuda-graph-max-bs-prefill"),
    }
    return {"options": opts, "required": [["--model-path", "--model"]], "engine_version": "0.5.23"}


def test_classify_covers_every_problem_class():
    chunks = [["--tp", "8"], ["--nsa-decode-backend", "trtllm"], ["--mem-fractoin-static", "0.9"],
              ["--dsa-decode-backend", "cutlas"], ["--tp-size", "x"], ["--cuda-graph-max-bs", "256"],
              ["--tensor-parallel-size", "8"], ["--enable-nan-detection"]]
    parsed = [{"ok": False, "unknown": ["--tp", "8"]}, {"ok": False, "unknown": ["--nsa-decode-backend", "trtllm"]},
              {"ok": False, "unknown": ["--mem-fractoin-static", "0.9"]},
              {"ok": False, "error": "argument --dsa-decode-backend: invalid choice: 'cutlas' (choose from 'fa3', 'trtllm')"},
              {"ok": False, "error": "argument --tp-size: invalid int value: 'x'"},
              {"ok": False, "unknown": ["--cuda-graph-max-bs", "256"]},
              {"ok": True, "warnings": []}, {"ok": False, "unknown": ["--enable-nan-detection"]}]
    ren, rem = flag_rules(RENAMES, [{"option": "enable-nan-detection", "replacement": "use the canary"}], "0.5.23")
    errors, warnings, verdicts = classify(chunks, parsed, _meta(), ren, rem)
    by = {e["option"]: e for e in errors}
    assert by["tp"]["problem"] == "abbreviation" and by["tp"]["replacement"] == "tp-size"
    assert by["nsa-decode-backend"]["problem"] == "renamed" and by["nsa-decode-backend"]["replacement"] == "dsa-decode-backend"
    assert by["mem-fractoin-static"]["problem"] == "unknown" and by["mem-fractoin-static"]["candidates"] == ["mem-fraction-static"]
    assert by["dsa-decode-backend"]["problem"] == "invalid_choice" and by["dsa-decode-backend"]["choices"] == ["fa3", "trtllm"]
    assert by["tp-size"]["problem"] == "invalid_value" and "invalid int value" in by["tp-size"]["text"]
    assert by["cuda-graph-max-bs"]["problem"] == "abbreviation"
    assert by["cuda-graph-max-bs"]["candidates"] == ["cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill"]
    assert by["enable-nan-detection"]["problem"] == "removed" and "use the canary" in by["enable-nan-detection"]["text"]
    assert by["model-path"]["problem"] == "missing"
    assert [w["option"] for w in warnings] == ["tensor-parallel-size"]
    assert [v["verdict"] for v in verdicts] == ["abbreviation", "renamed", "unknown", "invalid_choice", "invalid_value",
                                                "abbreviation", "ok", "removed"]
    fixed = suggested_argv(chunks, errors)
    assert fixed[:5] == ["--cuda-graph-max-bs", "256", "--dsa-decode-backend", "trtllm", "--dsa-decode-backend"]
    assert "--nsa-decode-backend" not in fixed and "--tp" not in fixed and fixed[-4:] == ["--tp-size", "8", "--tp-size", "x"]
    assert suggested_argv([["serve", "/m"], ["--b", "1"], ["--no-a"]], []) == ["serve", "/m", "--no-a", "--b", "1"]


def test_renamed_option_with_a_value_the_new_option_rejects():
    ren = flag_rules(RENAMES, None, "0.5.23")[0]
    chunks = [["--nsa-decode-backend", "flashmla_kv"], ["--model", "/m"]]
    parsed = [{"ok": False, "unknown": ["--nsa-decode-backend", "flashmla_kv"]}, {"ok": True}]
    errors = classify(chunks, parsed, _meta(), ren, {})[0]
    assert len(errors) == 1 and errors[0]["choices"] == ["fa3", "trtllm"]
    assert "'flashmla_kv' is not a valid choice there" in errors[0]["text"]


def test_clean_argv_has_no_errors_and_keeps_deprecation_warnings():
    chunks = [["--model-path", "/m"], ["--tp-size", "8"]]
    parsed = [{"ok": True, "warnings": []}, {"ok": True, "warnings": ["\x1b[1;33m'--tp-size' is deprecated\x1b[0m"]}]
    errors, warnings, verdicts = classify(chunks, parsed, _meta())
    assert errors == []
    assert warnings == [{"option": "tp-size", "warning": "'--tp-size' is deprecated"}]
    assert [v["verdict"] for v in verdicts] == ["ok", "warning"]


def test_format_error_messages_name_the_fix():
    assert format_error({"option": "tp", "problem": "abbreviation", "replacement": "tp-size"}).endswith("use --tp-size")
    assert "valid choices: a, b" in format_error({"option": "x", "problem": "invalid_choice", "choices": ["a", "b"]})
    assert json.dumps(format_error({"option": "x", "problem": "unknown", "candidates": ["y"]})).count("--y") == 1
