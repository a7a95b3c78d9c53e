"""CI runs what the README says: ``.ci/run`` installs exactly the README's set-up before it runs the README's
test command, so a test that needs an optional extra the README does not install is caught (it must skip
with the reason), and the maintainers' extras (``lint``, ``docs``) are installed only after the tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(text: str) -> tuple[str, str]:
    """The README's two set-up commands ``(install, test)``: the first line of the ``bash`` block after the
    "Set-up" heading, without the ``&& tdlab run ...`` it ends with, and the second line."""
    section = text.split("## Set-up", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "no ```bash block under the README's Set-up heading"
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2, f"the Set-up block has {len(lines)} commands, not two"
    install = re.split(r"\s*&&\s*tdlab run\b", lines[0])[0]
    return install, lines[1]


def ci_before_tests(script: str, test: str) -> list[str]:
    """The commands ``.ci/run`` runs before the README's test command (comments and shell set-up dropped)."""
    lines = [line.strip() for line in script.splitlines()]
    assert test in lines, f".ci/run does not run the README's test command {test!r}"
    before = lines[: lines.index(test)]
    return [line for line in before if re.match(r"(python -m )?pip\b", line)]


def test_ci_installs_exactly_the_readmes_setup_before_its_test_command():
    install, test = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    installs = ci_before_tests((ROOT / ".ci" / "run").read_text(encoding="utf-8"), test)
    assert installs == [install], f".ci/run installs {installs} before the tests; the README installs {install!r}"


def test_the_check_catches_an_extra_install_and_a_missing_test_command():
    readme = "## Set-up\n\n```bash\npip install -e . && tdlab run markov-init   # a\npython -m pytest -q   # b\n```\n"
    install, test = readme_commands(readme)
    assert (install, test) == ("pip install -e .", "python -m pytest -q")
    extra = "set -e\npip install -e .\npip install -e '.[docs]'\npython -m pytest -q\n"
    assert ci_before_tests(extra, test) == ["pip install -e .", "pip install -e '.[docs]'"]
    assert ci_before_tests("pip install -e .\npython -m pytest -q\npip install ruff\n", test) == ["pip install -e ."]
    try:
        ci_before_tests("pip install -e .\npytest\n", test)
    except AssertionError as e:
        assert "does not run the README's test command" in str(e)
    else:
        raise AssertionError("a .ci/run without the README's test command passed")
