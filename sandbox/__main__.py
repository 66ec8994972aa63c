"""``python -m sandbox --port P --data PATH [--token T]``: the sandbox without Django."""

from sandbox.cli import main

if __name__ == "__main__":
    main()
