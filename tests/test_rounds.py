"""What ``--decide``'s rounds grow and keep: the training-length and reference-draws fields, the seed's length the
budget rule reads, and the state one run keeps across its rounds."""

from __future__ import annotations

import threading

from tdlab.experiments.base import get
from tdlab.rounds import RoundState, current_round, draws_field, in_round, length_field, lengths


def test_the_length_field_is_the_tables_else_the_atlas_steps_or_epochs_axis():
    assert length_field(get("markov-rank")) == "train.steps"  # the table
    assert length_field(get("anchors-mlp")) == "schedule.epochs"  # the atlas's epochs axis
    assert length_field(get("markov-bridge")) is None  # a length per budget: no single field


def test_lengths_are_the_configs_and_the_seeds_and_none_where_nothing_trains():
    exp = get("markov-init")
    assert lengths(exp, exp.make_config("quick")) == (2000.0, 8000.0)
    real = get("topics-real")
    cfg = real.make_config("quick")
    assert lengths(real, cfg) is not None
    assert lengths(real, cfg.model_copy(update={"model": cfg.model.model_copy(update={"checkpoint": "x"})})) is None


def test_only_the_experiment_that_names_its_reference_draws_has_them():
    assert draws_field(get("icl-lsa-vs-lca")) == "claims.reference_draws"
    assert draws_field(get("markov-init")) is None


def test_a_round_state_is_seen_on_every_thread_inside_its_block_and_a_fresh_one_outside():
    state = RoundState()
    with in_round(state):
        seen = []
        t = threading.Thread(target=lambda: seen.append(current_round()))
        t.start()
        t.join()
        assert current_round() is state and seen == [state]
    assert current_round() is not state and current_round().memo == {}
