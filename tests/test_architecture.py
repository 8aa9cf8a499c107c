"""The house's rules (the project's ARCHITECTURE.md; docs/README.md maps the rooms), read from the code itself.

Every module of the four apps is parsed with ``ast`` — nothing is imported —
and each ``import`` and ``from … import``, at the top or inside a function,
is an arrow from the module to the module it names. Dependencies point one
way: ``storyteller`` (the pipeline) -> ``memory``, ``knowledge`` ->
``campaigns``; ``storyteller.llm``, ``storyteller.tokens`` and ``storyteller.vendors`` are leaves any
app may use, and import nothing of ours beyond themselves. No two modules
import each other, however far round: a circle is a room drawn wrong.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = ("campaigns", "memory", "knowledge", "storyteller")
LEAVES = ("storyteller.llm", "storyteller.tokens", "storyteller.vendors")
# Which apps each app may import (beside itself and the leaves).
MAY_IMPORT = {"storyteller": {"memory", "knowledge", "campaigns"}, "memory": {"campaigns"},
              "knowledge": {"campaigns"}, "campaigns": set()}
# campaigns/state/: the event core below its domains, which register their types and hooks in its registry.
CORE = ("campaigns.state.events", "campaigns.state.registry", "campaigns.state.reading")
DOMAINS = ("campaigns.state.world", "campaigns.state.time", "campaigns.state.minds")
# Between the domains (their packages' docstrings): story time and minds ask the world where people and things
# are; the world's whole-world checks and writers read story time's rules; nothing there imports minds.
ACROSS = {
    "campaigns.state.time": {"campaigns.state.world.world"},
    "campaigns.state.minds": {"campaigns.state.world.world"},
    "campaigns.state.world.lint": {"campaigns.state.time.rulebook", "campaigns.state.time.triggers"},
    "campaigns.state.world.authoring": {"campaigns.state.time.rules"},
    "campaigns.state.world.offscene": {"campaigns.state.time.rules"},
}


def _modules():
    """Return {dotted name: path} of every Python module of the apps."""
    found = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _known(name):
    """Return the longest prefix of ``name`` that is one of our modules, or None (another project's)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in MODULES:
            return prefix
    return None


def _imports(name, path):
    """Return the set of our modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {_known(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*above, *([base] if base else [])])
            for alias in node.names:
                targets.add(_known(f"{base}.{alias.name}") or _known(base))
    return targets - {None, name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _app(module):
    return module.split(".", 1)[0]


def _in(module, package):
    return module == package or module.startswith(f"{package}.")


def _circles(graph):
    """Return the strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def _arrows(graph, allowed):
    """Return "a -> b" for every arrow of ``graph`` that ``allowed(a, b)`` refuses."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if not allowed(source, target))


def _one_way(source, target):
    """storyteller -> memory, knowledge -> campaigns, and the leaves for everyone."""
    return (_app(source) == _app(target) or _app(target) in MAY_IMPORT[_app(source)]
            or any(_in(target, leaf) for leaf in LEAVES))


def _leaf(source, target):
    """A leaf imports nothing of ours but the leaves."""
    return not any(_in(source, leaf) for leaf in LEAVES) or any(_in(target, leaf) for leaf in LEAVES)


def _core(source, target):
    """The event core (events, registry, reading) never imports a domain of campaigns/state/."""
    return not any(_in(source, core) for core in CORE) or not any(_in(target, domain) for domain in DOMAINS)


def _across(source, target):
    """A domain imports another domain only where ``ACROSS`` (and the packages' docstrings) say."""
    domain = next((d for d in DOMAINS if _in(target, d)), None)
    if domain is None or _in(source, domain) or not any(_in(source, d) for d in DOMAINS):
        return True
    return any(target in permitted for room, permitted in ACROSS.items() if _in(source, room))


def test_the_reader_sees_every_app_and_the_arrows_between_them():
    assert {"campaigns.state.events", "storyteller.turns", "memory.recall", "knowledge.retrieval"} <= set(MODULES)
    assert "campaigns.state.registry" in GRAPH["campaigns.state.events"]
    assert "campaigns.lineage" in GRAPH["campaigns.state.events"], "a relative import is read as its module"
    assert "campaigns.state.time.rulebook" in GRAPH["campaigns.state.world.lint"], "so is one from a sibling package"
    assert "memory.recall_index" in GRAPH["storyteller.steps.minds"], "and an import inside a function"


def test_dependencies_point_one_way_storyteller_then_memory_and_knowledge_then_campaigns():
    assert _arrows(GRAPH, _one_way) == [], "an arrow points the wrong way: the code is in the wrong room"


def test_the_leaves_import_nothing_of_ours_but_each_other():
    assert _arrows(GRAPH, _leaf) == []


def test_the_event_core_never_imports_a_domain():
    assert _arrows(GRAPH, _core) == [], "a domain registers its types and hooks in the registry instead"


def test_the_domains_import_each_other_only_where_their_packages_say():
    assert _arrows(GRAPH, _across) == []


def test_no_two_modules_import_each_other_however_far_round():
    assert _circles(GRAPH) == []


def test_an_arrow_the_wrong_way_or_a_circle_would_be_found():
    wrong = {"campaigns.story": {"storyteller.turns", "storyteller.tokens"},
             "memory.recall": {"knowledge.retrieval"},
             "knowledge.importer": {"storyteller.context", "storyteller.llm"},
             "storyteller.tokens": {"campaigns.lineage"},
             "campaigns.state.events": {"campaigns.state.time.rulebook"},
             "campaigns.state.world.world": {"campaigns.state.time.clock", "campaigns.state.minds.beliefs"}}
    assert _arrows(wrong, _one_way) == ["campaigns.story -> storyteller.turns",
                                        "knowledge.importer -> storyteller.context",
                                        "memory.recall -> knowledge.retrieval"]
    assert _arrows(wrong, _leaf) == ["storyteller.tokens -> campaigns.lineage"]
    assert _arrows(wrong, _core) == ["campaigns.state.events -> campaigns.state.time.rulebook"]
    assert _arrows(wrong, _across) == ["campaigns.state.world.world -> campaigns.state.minds.beliefs",
                                       "campaigns.state.world.world -> campaigns.state.time.clock"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]


def _tree(module):
    return ast.parse(MODULES[module].read_text())


def _declared(module, name):
    """Return the value ``name`` is assigned at the top of ``module``, or None."""
    for node in _tree(module).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def test_every_post_turn_step_declares_the_one_step_shape_and_the_scheduler_runs_each_once():
    # The scheduler and its queue across processes (queued), and what every step shares: where its request starts
    # (prompts), what its requests cost (requests).
    shared = {"storyteller.steps.postturn", "storyteller.steps.queued", "storyteller.steps.prompts",
              "storyteller.steps.requests"}
    steps = sorted(m for m in MODULES if m.startswith("storyteller.steps.") and m not in shared)
    assert len(steps) == 7
    for module in steps:
        declared = _declared(module, "STEP")
        assert isinstance(declared, ast.Call) and declared.func.id == "Step" and len(declared.args) == 4, module
    listed = [f"storyteller.steps.{entry.value.id}" for entry in _declared("storyteller.steps.postturn", "STEPS").elts
              if isinstance(entry, ast.Attribute) and entry.attr == "STEP"]
    assert sorted(listed) == steps, "postturn.STEPS runs every step's STEP, each once"


def test_every_benchmark_group_is_one_module_the_thin_command_runs():
    groups = sorted(m.rsplit(".", 1)[1] for m in MODULES if m.startswith("storyteller.bench."))
    groups.remove("measure")
    table = _declared("storyteller.bench", "BENCHMARKS")
    listed = {key.value: f"{value.value.id}.{value.attr}" for key, value in zip(table.keys, table.values)}
    # A group's name on the command line may spell the module's underscore as a hyphen (``--only model-work``).
    assert {key.replace("-", "_"): run for key, run in listed.items()} == {group: f"{group}.run" for group in groups}
    command = _tree("storyteller.management.commands.bench")
    assert sum(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in command.body) == 1, "one Command"
