"""The demo Debian image's packages against the kinds' declarations (issue 37): every tool a
kind that runs in a user's domain declares (Kind.tools: program, Debian package) has its
package in the image's recipe (imagerecipe.Recipe.packages), apart from the exceptions below,
each with its reason.

The recipe's package list is not derived from the declarations: that list differs from the
kinds' packages (order, the image's own packages, a JRE where the jvm kind declares a JDK, a
server kind that declares no tool), so deriving it would change the recipe's hash and force an
image rebuild. This check keeps the two from drifting instead."""

from __future__ import annotations

from hugelab.vm.domains.imagerecipe import Recipe
from hugelab.workloads import registry
from hugelab.workloads.base import Workload
from hugelab.workloads.kind import Kind, Tool

# (kind, program) the kind runs on the host, never in the guest
HOST_SIDE = {
    ("hugelab-mem", "cc"): "hugelab-mem is compiled on the host and its static binary copied "
                           "into the guest (vm/domains/remote.py)",
    ("jvm", "javac"): "compiles hugelab's own threads program on the host; `threads` is "
                      "refused in a user's domain",
}
# (kind, program) -> the image's package that provides the program instead of the declared one
PROVIDED_BY = {
    ("jvm", "java"): "openjdk-17-jre-headless",  # the JDK is declared for javac, on the host
}
# (kind, program) the image lacks today: a trial of that kind in the demo image fails with the
# package named (ToolMissingError). Adding the package changes the recipe's hash (a rebuild).
KNOWN_GAPS = {
    ("build", "make"): "the default demo image has no make (nor a compiler)",
    ("jvm", "sunflow"): "the default benchmark's jars; a user's own jar runs without it",
}


def missing_packages(kinds: dict[str, Kind], packages: tuple[str, ...]) -> list[str]:
    """'kind: program (package)' for each tool of a domain kind whose package is not in
    `packages`, the exceptions above left out."""
    found = []
    for kind in kinds.values():
        if not kind.runs("domain"):
            continue
        for tool in kind.tools:
            key = (kind.name, tool.name)
            if key in HOST_SIDE or key in KNOWN_GAPS:
                continue
            package = PROVIDED_BY.get(key, tool.package)
            if package not in packages:
                found.append(f"{kind.name}: {tool.name} ({package})")
    return found


def test_every_domain_kinds_tool_is_in_the_image() -> None:
    missing = missing_packages(registry.kinds(), Recipe().packages)
    assert not missing, ("kinds that run in a user's domain declare tools whose packages the "
                         "demo image (vm/domains/imagerecipe.py) lacks: " + ", ".join(missing))


def test_the_exceptions_are_still_true() -> None:
    """Each exception names a tool its kind still declares; a known gap the image has closed
    is no longer listed as one."""
    kinds = registry.kinds()
    declared = {(k.name, t.name): t.package for k in kinds.values() for t in k.tools}
    for key in (*HOST_SIDE, *PROVIDED_BY, *KNOWN_GAPS):
        assert key in declared, f"{key} is not a declared tool any more: drop its exception"
        assert kinds[key[0]].runs("domain"), f"{key[0]} no longer runs in a domain"
    packages = Recipe().packages
    for key in KNOWN_GAPS:
        assert declared[key] not in packages, f"the image has {declared[key]} now: drop {key}"
    for package in PROVIDED_BY.values():
        assert package in packages


def test_a_missing_package_is_named() -> None:
    kind = Kind(name="valkey", workload=Workload, summary="s",
                where=frozenset({"host", "domain"}),
                tools=(Tool("valkey-server", "valkey"), Tool("redis-cli", "redis-tools")))
    host_only = Kind(name="hostonly", workload=Workload, summary="s",
                     where=frozenset({"host"}), tools=(Tool("x", "not-in-image"),))
    assert missing_packages({"valkey": kind, "hostonly": host_only}, Recipe().packages) == [
        "valkey: valkey-server (valkey)"]
