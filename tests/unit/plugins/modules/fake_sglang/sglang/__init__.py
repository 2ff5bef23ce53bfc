# A tiny stand-in for the sglang package, used only by tests/unit/plugins/modules/test_server_args.py
# to exercise the module's probe protocol without the real 1.3 GB install. The real parser is tested
# in tests/integration/test_server_args_sglang.py.
__version__ = "9.9.1"
