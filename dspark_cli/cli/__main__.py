"""`python -m dspark_cli.cli`: the `dspark` program."""

from dspark_cli.cli import entry

if __name__ == "__main__":
    entry()
