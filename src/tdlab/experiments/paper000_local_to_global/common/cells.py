"""The (p, q) cells of the two-state chain square that markov-bridge and markov-icommon train on, as a config type."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tdlab.config import Distinct

Prob = Annotated[float, Field(gt=0.0, lt=1.0)]  # a switching probability of the chain, in (0, 1)
Cells = Annotated[list[tuple[Prob, Prob]], Field(min_length=1), Distinct]  # (p, q) cells, each once
