"""The README's API tour runs as written."""
import pathlib
import re
import warnings


def test_readme_tour_runs():
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, "README.md", "exec"), {})
