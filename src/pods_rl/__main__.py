"""`pods` and `python -m pods_rl`: a training command first restarts itself keeping freed memory (pods_rl.memory)."""

from pods_rl.memory import restart_retaining_freed_memory


def main() -> None:
    restart_retaining_freed_memory()
    from pods_rl.cli import app

    app()


if __name__ == "__main__":
    main()
