# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Engine parser probe (module_utils/serving/server_args.py): run by the ENGINE's interpreter (its venv) as
``python -c SOURCE ENGINE``; never imports Ansible.

It builds the engine's own parser (SGLang ``ServerArgs.add_cli_args``, SMG ``RouterArgs.add_cli_args``,
``transformers serve`` through its click command). Protocol: one JSON request per stdin line, one JSON answer per
line on the original stdout; everything the engine prints goes to stderr. Requests: {"op": "describe"} and
{"op": "parse", "chunks": [[...], ...]}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import contextlib
import functools
import io
import json
import logging
import os
import sys


class ProbeError(Exception):
    pass


class Capture(logging.Handler):
    def __init__(self):
        logging.Handler.__init__(self, logging.WARNING)
        self.records = []

    def emit(self, record):
        try:
            self.records.append(record.getMessage())
        except Exception:
            pass


def build_sglang():
    class P(argparse.ArgumentParser):
        def error(self, message):
            raise ProbeError(message)
    import sglang
    from sglang.srt.server_args import ServerArgs
    p = P(prog="sglang.launch_server", allow_abbrev=False, add_help=False)
    ServerArgs.add_cli_args(p)
    required = []
    for a in p._actions:
        if a.required and a.option_strings:
            required.append(list(a.option_strings))
        a.required = False
    version = getattr(sglang, "__version__", None)
    if not version:
        from importlib.metadata import version as dist_version
        version = dist_version("sglang")
    return p, version, required


def build_smg():
    # SMG (PyPI smg): the parser `smg launch` builds (smg/launch_router.py parse_router_args: RouterArgs.add_cli_args
    # on a plain ArgumentParser). smg/version.py lags the wheel (1.13.0 ships "1.1.0"): the dist metadata is the truth.
    class P(argparse.ArgumentParser):
        def error(self, message):
            raise ProbeError(message)
    from importlib.metadata import version as dist_version
    from smg.router_args import RouterArgs
    p = P(prog="smg launch", allow_abbrev=False, add_help=False)
    RouterArgs.add_cli_args(p, use_router_prefix=False)
    return p, dist_version("smg"), []


def describe_argparse(p):
    opts = {}
    for a in p._actions:
        if not a.option_strings:
            continue
        longs = [o for o in a.option_strings if o.startswith("--")]
        canonical = longs[0] if longs else a.option_strings[0]
        kind = type(a).__name__
        for o in a.option_strings:
            if kind == "BooleanOptionalAction" and o.startswith("--no-"):
                canon = "--no-" + canonical[2:]
            else:
                canon = canonical
            choices = list(a.choices) if a.choices is not None else None
            if choices is not None:
                choices = [c if isinstance(c, (str, int, float, bool)) else str(c) for c in choices]
            opts[o] = {"canonical": canon, "kind": kind, "nargs": a.nargs if isinstance(a.nargs, (int, str)) or a.nargs is None else str(a.nargs),
                       "choices": choices, "deprecated": "Deprecated" in kind or (a.help or "").startswith("Deprecated"),
                       "negatable": kind == "BooleanOptionalAction"}
    return opts


def parse_chunk(p, chunk):
    cap = Capture()
    root = logging.getLogger()
    root.addHandler(cap)
    buf = io.StringIO()
    res = {"ok": True}
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            _ns, extra = p.parse_known_args(list(chunk))
        if extra:
            res = {"ok": False, "unknown": extra}
    except ProbeError as exc:
        res = {"ok": False, "error": str(exc)}
    except Exception as exc:
        res = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    finally:
        root.removeHandler(cap)
    res["warnings"] = cap.records + [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return res


def build_click():
    # transformers serve is a typer command (typer vendors its own click); build the serve command alone
    # (the HF group class of the full CLI cannot be converted) and parse with click's make_context.
    import typer
    import typer.main
    import transformers
    from transformers.cli.serve import Serve
    app = typer.Typer()
    app.command(name="serve")(Serve)
    return typer.main.get_command(app), transformers.__version__


def describe_click(cmd):
    opts = {}
    required = []
    for prm in cmd.params:
        if getattr(prm, "param_type_name", "") != "option":
            continue
        longs = [o for o in prm.opts if o.startswith("--")]
        canonical = longs[0] if longs else prm.opts[0]
        ptype = getattr(prm, "type", None)
        choices = list(ptype.choices) if ptype is not None and getattr(ptype, "choices", None) else None
        kind = "flag" if getattr(prm, "is_flag", False) else "value"
        secondary = list(getattr(prm, "secondary_opts", []) or [])
        for o in prm.opts:
            opts[o] = {"canonical": canonical, "kind": kind, "nargs": prm.nargs, "choices": choices,
                       "deprecated": bool(getattr(prm, "deprecated", False)), "negatable": bool(secondary)}
        for o in secondary:
            opts[o] = {"canonical": "--no-" + canonical[2:], "kind": kind, "nargs": 0, "choices": None, "deprecated": False, "negatable": True}
        if prm.required:
            required.append(list(prm.opts))
    return opts, required


def parse_click(cmd, chunk):
    buf = io.StringIO()
    res = {"ok": True}
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            cmd.make_context("serve", list(chunk), resilient_parsing=False)
    except Exception as exc:
        names = [c.__name__ for c in type(exc).__mro__]
        if "NoSuchOption" in names:
            res = {"ok": False, "unknown": [getattr(exc, "option_name", None) or chunk[0]]}
        elif "UsageError" in names:
            msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            res = {"ok": False, "error": "argument %s: %s" % (chunk[0], msg)}
        else:
            res = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    res["warnings"] = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return res


def serve(engine, lines, answer):
    """Build the parser of ``engine``, then answer each JSON request of ``lines`` through ``answer(obj)``."""
    try:
        if engine == "sglang":
            p, version, required = build_sglang()
            opts = describe_argparse(p)
            parse = functools.partial(parse_chunk, p)
            prog = "sglang.launch_server"
        elif engine == "smg":
            p, version, required = build_smg()
            opts = describe_argparse(p)
            parse = functools.partial(parse_chunk, p)
            prog = "smg launch"
        elif engine == "transformers":
            cmd, version = build_click()
            opts, required = describe_click(cmd)
            parse = functools.partial(parse_click, cmd)
            prog = "transformers serve"
        else:
            answer({"fatal": "unsupported engine %r" % engine})
            return
    except BaseException as exc:
        answer({"fatal": "cannot build the %s parser: %s: %s" % (engine, type(exc).__name__, exc)})
        return
    for line in lines:
        req = json.loads(line)
        if req["op"] == "describe":
            answer({"engine_version": str(version), "options": opts, "required": required, "prog": prog,
                    "python": sys.version.split()[0]})
        elif req["op"] == "parse":
            answer({"parsed": [parse(c) for c in req["chunks"]], "whole": parse([t for c in req["chunks"] for t in c])})
        else:
            answer({"fatal": "unknown op"})


def main():
    """The protocol on the original stdout; the engine's own output (fd 1 and sys.stdout) goes to stderr."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()
    serve(sys.argv[1], sys.stdin, answer)


if __name__ == "__main__":
    main()
