import sys


def to_bibtex(title: str, year: int) -> str:
    return f"@misc{{x, title={{{title}}}, year={{{year}}}}}"


if __name__ == "__main__":
    print(to_bibtex(sys.argv[1], int(sys.argv[2])))
