"""Analytical cost model: FLOPs, memory, communication, pipeline bubble, assembled into a step time.

Every function is pure and vectorised: layout knobs arrive as numpy arrays (one entry per candidate), model, cluster and
training specs as scalars, so the same code prices one layout for `explain` and a million for the search.
"""
