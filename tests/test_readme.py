"""The README's API tour runs as written."""
import pathlib
import re
import warnings

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_tour_runs():
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, "README.md", "exec"), {})


def test_readme_stays_short_and_links_pages_that_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert (README.parent / target.split("#")[0]).exists(), target
    quick = text[text.index("## Quick start"):].split("```")[1]
    assert quick.strip().splitlines()[1:] == ["pip install . && fastep demo",
                                              'pip install ".[test]" && python -m pytest -q']
