"""The capture test's snippet with the guard defeated: does a first launch of the copy inside a capture work?"""
import sys, torch
sys.path.insert(0, "tests")  # run from the repository root
import test_repitch as t
src = t._CAPTURE_FIRST.replace("from fluxlite.kernels import repitch", "from fluxlite.kernels import repitch\nrepitch.torch = type('T', (), {'cuda': type('C', (), {'is_current_stream_capturing': staticmethod(lambda: False)})})")
src = src.replace('assert not any(isinstance(k, tuple) for k in _sequential.PROCESS.repitch.get(0, {})), "compiled inside a capture"', 'print("compiled inside the capture:", any(isinstance(k, tuple) for k in _sequential.PROCESS.repitch.get(0, {})))')
exec(compile(src, "snippet", "exec"))
