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
