"""The profiles of every experiment side by side: quick, standard (:mod:`tdlab.costs.standard`) and
paper, as the Profiles page's table (``python -m tdlab.pages.profiles``)."""

from __future__ import annotations

from tdlab.config import read_field
from tdlab.costs.quick_times import quick_times
from tdlab.costs.standard import standard_of
from tdlab.rounds import length_field

__all__ = ["table"]


def table() -> str:
    """Markdown: every experiment's standard settings against quick's and paper's, and why
    (``python -m tdlab.pages.profiles``; docs/profiles.md holds it between ``standard:start/end``)."""
    from tdlab.experiments.base import get
    from tdlab.experiments.catalog import CATALOG

    lines = [
        "| experiment | length field | quick | standard | paper | members q/s/p | quick time | predicted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in CATALOG:
        exp = get(name)
        field = length_field(exp)
        cfgs = [exp.make_config(p) for p in ("quick", "standard", "paper")]
        lengths = [read_field(c, field) if field else "–" for c in cfgs]
        st = standard_of(exp, exp.profiles["quick"], exp.profiles["paper"])
        quick = quick_times().get(name)
        measured = f"{quick.seconds:g} s ({quick.note.split(',')[0]})" if quick is not None else "–"
        note = f"~{st.predicted_s:.0f} s" if st.predicted_s else st.reason
        note += "".join(f"; the seed's {f} {v:g}" for f, v in st.paper_lrs.items())
        lines.append(
            f"| `{name}` | {field or '–'} | {lengths[0]} | {lengths[1]} | {lengths[2]} | "
            f"{'/'.join(str(c.members) for c in cfgs)} | {measured} | {note} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
