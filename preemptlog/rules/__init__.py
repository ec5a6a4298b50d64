"""The rule engine: four-gate verdicts from the joiner's evidence, rules as data.

- ``default.toml``: the shipped rules (thresholds with where each default comes from,
  derived values, rules with samples);
- ``expr.py``: the safe expression language rule conditions are written in;
- ``model.py``: loading and validating rule files, overlays, ``--set`` overrides;
- ``engine.py``: column-wise evaluation over all events at once -> verdicts;
- ``factors.py``: contributing factors; ``recommend.py``: fixes with numbers
  computed from the incident.
"""

from .model import RuleSet, load_rules

__all__ = ["RuleSet", "load_rules"]
