"""`python -m spyglass.dashboards`: regenerate dashboards/generated/*.json from the code."""

from spyglass.dashboards.model import write

if __name__ == "__main__":
    for path in write():
        print(path)
