"""Many voices (seed 002 回合结构, 角色简报, 离场行动, 扩展世界; issue 15): the game master, characters who act for
themselves, off-stage rounds and the world author.

Phase 1 holds the parts that need neither story time nor character minds:
the turn's bounds (``rounds``), off-stage selection and the away note
(``offstage``), the campaign's limits (``limits``), the JSON schemas of every
voice (``schemas``) and the world author (``author``). docs/voices.md is the
contract the rounds pipeline (phase 3) wires them into.
"""
