"""Per-arm measurements become one table per set of quantities; everything else stays a tree."""

from __future__ import annotations

from tdlab.report.measurement_tables import MAX_MEMBERS, format_cell, measurement_tables


def test_arms_with_the_same_quantities_share_a_table_and_the_rest_is_kept_in_order():
    values = {
        "c3": 1.156,
        "l2/sgd": {"z": [2.5, 2.6], "g": [1.1, 1.12], "floor": 0.87},
        "summary": {"same": 0.1, "diff": -0.01},
        "l2/adam": {"z": [5.1, 5.2], "g": [None, 1.0], "floor": 0.87},
        "fig6_arms": ["no-l2/ce/adam"],
        "nested": {"a": {"b": 1}, "c": 2},
        "one": {"only": 1.0},
    }
    tables, rest = measurement_tables(values)
    assert [t.columns for t in tables] == [("z", "g", "floor"), ("same", "diff")]
    assert tables[0].rows == [("l2/sgd", ["2.5/2.6", "1.1/1.12", "0.87"]), ("l2/adam", ["5.1/5.2", "—/1", "0.87"])]
    assert tables[1].rows == [("summary", ["0.1", "-0.01"])]
    assert list(rest) == ["c3", "fig6_arms", "nested", "one"]  # strings, nesting and single values stay a tree


def test_long_member_lists_are_cut_and_counted():
    xs = [float(i) for i in range(MAX_MEMBERS + 3)]
    assert format_cell(xs).endswith(f"/… ({MAX_MEMBERS + 3} in all)")
    assert format_cell(xs).count("/") == MAX_MEMBERS
    assert format_cell(None) == "—" and format_cell(3) == "3"
    assert measurement_tables({"a": {"x": True, "y": 1.0}}) == ([], {"a": {"x": True, "y": 1.0}})  # a flag is no number


def test_a_mapping_of_rows_one_level_down_is_a_table_titled_by_its_name():
    values = {
        "cells": {
            "L=2/d=4": {"loss": [0.5, 0.25], "gap": 0.125},
            "L=4/d=4": {"loss": [0.75, None], "gap": -1.0},
            "L=8/d=8": {"acc": 0.5, "steps": 100},
        },
        "top": {"loss": 1.5, "gap": 2.0},
        "settings": {"paper": {"x": 1.0, "y": 2.0}},
    }
    tables, rest = measurement_tables(values)
    assert [(t.title, t.columns) for t in tables] == [
        ("cells", ("loss", "gap")),
        ("cells", ("acc", "steps")),
        ("", ("loss", "gap")),
        ("settings", ("x", "y")),
    ]
    assert tables[0].rows == [("L=2/d=4", ["0.5/0.25", "0.125"]), ("L=4/d=4", ["0.75/—", "-1"])]
    assert tables[1].rows == [("L=8/d=8", ["0.5", "100"])]
    assert tables[2].rows == [("top", ["1.5", "2"])]  # the top level's rows keep their own, untitled table
    assert tables[3].rows == [("paper", ["1", "2"])]
    assert rest == {}


def test_a_nested_mapping_with_anything_but_rows_stays_in_the_rest_unchanged():
    mixed = {"a": {"x": 1.0, "y": 2.0}, "b": 3.0}  # a row beside a plain number
    flag = {"a": {"x": 1.0, "y": 2.0}, "b": {"x": True, "y": 1.0}}  # a flag is no number
    single = {"a": {"x": 1.0, "y": 2.0}, "b": {"x": 1.0}}  # one name is no row
    deeper = {"a": {"b": {"x": 1.0, "y": 2.0}, "c": {"x": 1.0, "y": 2.0}}}  # two levels down
    text = {"a": {"x": 1.0, "y": 2.0}, "b": {"x": "tied", "y": 2.0}}
    values = {"mixed": mixed, "flag": flag, "single": single, "deeper": deeper, "text": text, "empty": {}}
    tables, rest = measurement_tables(values)
    assert tables == []
    assert rest == values and list(rest) == list(values)


NESTED = {"c3": 1.5, "cells": {"L=2": {"loss": 0.5, "gap": 0.125}, "L=4": {"loss": 0.75, "gap": -1.0}}}


def test_the_report_and_the_printed_summary_show_a_nested_table_with_its_title(monkeypatch):
    from rich.console import Console

    from tdlab import cli
    from tdlab.report.html import render_report

    summary = {"experiment": "e", "figure": "F", "paper": "P", "run_id": "r", "profile": "quick", "status": "done"}
    summary |= {"claims": [], "notes": [], "figures": [], "measurements": NESTED, "env": {}, "seed": 0, "members": 1}
    html = render_report(summary, {"experiment": "e"})
    table = html.split("<h2>Measurements</h2>", 1)[1].split("</table>", 1)[0]
    assert "<caption><code>cells</code></caption>" in table
    assert "<code>L=2</code>" in table and '<td class="num">0.125</td>' in table and '<td class="num">-1</td>' in table
    assert "c3: 1.5" in html and "L=2:" not in html  # the rows are no longer in the tree below

    console = Console(width=120, record=True)
    monkeypatch.setattr(cli, "out_console", console)
    cli._print_measurements(NESTED)
    lines = [line.replace("┃", " ").replace("│", " ") for line in console.export_text().splitlines()]
    top = lines.index("measurements: cells")
    assert lines[top + 1].split() == ["loss", "gap"]
    assert [line.split() for line in lines[top + 2 :] if line.split()[:1] in (["L=2"], ["L=4"])] == [
        ["L=2", "0.5", "0.125"],
        ["L=4", "0.75", "-1"],
    ]
