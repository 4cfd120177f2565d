"""The libraries the docs link to (intersphinx), and a way to save their inventories for
offline builds: ``python docs/inventories.py`` (needs the web once; writes
docs/_inventories/, which git ignores)."""
import urllib.request
from pathlib import Path

#: name -> documentation root whose objects.inv intersphinx reads
LIBRARIES = {
    "python": "https://docs.python.org/3/",
    "numpy": "https://numpy.org/doc/stable/",
    "scipy": "https://docs.scipy.org/doc/scipy/",
    "sklearn": "https://scikit-learn.org/stable/",
    "matplotlib": "https://matplotlib.org/stable/",
}
#: where saved inventories live
SAVED = Path(__file__).resolve().parent / "_inventories"


def reachable(url, timeout=3):
    """Whether ``url``'s objects.inv answers."""
    try:
        with urllib.request.urlopen(url + "objects.inv", timeout=timeout):
            return True
    except Exception:              # offline, a proxy, a moved site: no links, no failure
        return False


if __name__ == "__main__":
    SAVED.mkdir(exist_ok=True)
    for name, url in LIBRARIES.items():
        with urllib.request.urlopen(url + "objects.inv", timeout=30) as response:
            (SAVED / f"{name}.inv").write_bytes(response.read())
        print(f"saved {SAVED / (name + '.inv')}")
