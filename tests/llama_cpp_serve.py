"""llama-cpp-python's own server, with ggml's extra buffer types off: ``python -m tests.llama_cpp_serve <its options>``.

The server has no option for them, and they crash virtualised AMX CPUs
(issue 21), so its default model parameters are wrapped first, as the
built-in narrator's process wraps them (``llm.builtin_child``); then the
server's own ``main`` reads the options as ``python -m llama_cpp.server``
would.
"""

import sys

from storyteller.llm.builtin_child import turn_off_extra_buffers

if __name__ == "__main__":
    print(f"storyteller: ggml's extra buffer types {turn_off_extra_buffers()}", file=sys.stderr, flush=True)
    from llama_cpp.server.__main__ import main

    main()
