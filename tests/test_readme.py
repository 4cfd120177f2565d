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


def test_readme_counts_example_runs_as_a_whole():
    """The counts example is complete (it makes its data) and predicts finite rates."""
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                 if 'likelihood="poisson"' in b)
    scope = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, "README.md", "exec"), scope)
    import numpy as np
    rate = scope["reg"].predict(scope["X_new"], exposure=scope["e_new"])
    truth = np.exp(np.sin(2 * scope["X_new"][:, 0]))
    assert np.all(np.isfinite(rate)) and np.max(np.abs(np.log(rate / truth))) < 0.5
