"""The standard wording of `wait` and `reject` reasons, as the SDK's own
placement writes them (`Shortfall.reason`, `Cluster.unplaced`,
`Cluster.claims_unplaced`, `Cluster.place_gang`), byte for byte the Rust SDK's `reason` module. A
policy that decides on its own can word its reasons the same way, so users
see one vocabulary whichever policy runs:

    from wasmgpu_policy import reason, wait
    why = reason.not_now(reason.asked(request))
    # "no eligible node has 4 GPU(s) with at least 40960 MiB each free right now"
    decision = wait(pod, why)

The wording is for people; match on `Shortfall.kind`, not on these strings.
"""

from __future__ import annotations

from wit_world.imports import types as t

from .claims import claim_devices

__all__ = [
    "asked",
    "asked_nvlink",
    "asked_shape",
    "claim_request",
    "claims_most_free",
    "claims_together",
    "gang_never",
    "gang_placed_without",
    "gang_short",
    "never",
    "no_eligible_node",
    "not_now",
    "quoted",
]


def quoted(text: str) -> str:
    """`text` in double quotes, escaped as Rust's `{:?}` writes a string
    (what the Rust SDK puts around a MIG profile)."""
    out = ['"']
    for c in text:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\0":
            out.append("\\0")
        elif ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0:
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def asked_shape(shape: t.GpuShape) -> str:
    """What a GPUResource shape asks for, in words (see `asked`)."""
    model = f' matching "{shape.model}"' if shape.model is not None else ""
    if shape.mig_profile is not None:
        return f"{shape.count} MIG instance(s) of profile {quoted(shape.mig_profile)}{model}"
    if shape.sharing == t.Sharing.SHARED:
        return f"{shape.count} GPU(s){model} with {shape.memory_mib} MiB to share"
    if shape.memory_mib == 0:
        return f"{shape.count} GPU(s){model}"
    return f"{shape.count} GPU(s){model} with at least {shape.memory_mib} MiB each"


def asked(request: t.Request) -> str:
    """What `request` asks for, in words: `2 GPU(s) matching "NVIDIA H100*"
    with at least 40960 MiB each`, `1 GPU(s) with 8192 MiB to share`, `1 MIG
    instance(s) of profile "1g.10gb"`; for a DRA request, per claim the sum
    of its requests' first alternative's count: `2 device(s) for claim
    ml/train`, `2 device(s) for claim ml/a, 1 device(s) for claim ml/b`
    (`no devices: its claims are allocated already` for none)."""
    ask = request.ask
    if isinstance(ask, t.Ask_Gpus):
        return asked_shape(ask.value)
    if not ask.value:
        return "no devices: its claims are allocated already"
    return ", ".join(f"{claim_devices(c)} device(s) for claim {c.name}" for c in ask.value)


def asked_nvlink(request: t.Request) -> str:
    """`asked`, with the GPUs required to be NVLink peers of one another
    (`Nvlink.REQUIRE`)."""
    return f"{asked(request)} that are all NVLink peers of one another"


def no_eligible_node() -> str:
    """The request has no eligible node at all (a `reject` reason)."""
    return "no eligible node: node selector, affinity or taints exclude every GPU node"


def never(what: str) -> str:
    """No eligible node could hold `what` (an `asked` phrase) even with all
    of its GPUs free (a `reject` reason)."""
    return f"no eligible node has {what}, even when idle"


def not_now(what: str) -> str:
    """Some eligible node could hold `what` once GPUs are released, none can
    now (a `wait` reason)."""
    return f"no eligible node has {what} free right now"


def gang_never(gang: str, pod: str, why: str) -> str:
    """Gang `gang` can never be placed: member `pod` fits nowhere, for `why`
    (a `reject` reason for every member)."""
    return f"gang {gang} can never be placed: member {pod} fits nowhere ({why})"


def gang_short(gang: str, fit: int, need: int, bound: int, min_member: int) -> str:
    """Gang `gang` is short: `fit` of the `need` more members it needs fit
    now (a `wait` reason for every member)."""
    return (
        f"gang {gang}: {fit} of the {need} more members needed fit now "
        f"({bound} bound, minMember {min_member}); all or nothing, so none is placed yet"
    )


def gang_placed_without(gang: str, fit: int, need: int) -> str:
    """Gang `gang` is placed without this member (a `wait` reason for the
    members left over)."""
    return f"gang {gang} is placed without this member ({fit} of {need} needed fit); it waits for room"


def claim_request(claim: str, request: str, count: int, candidates: int) -> str:
    """One request of a DRA claim, as what is missing: `2 device(s) for claim
    ml/train request "gpus" (8 candidate(s) on eligible nodes)`: `count` is
    its first alternative's, `candidates` how many of that alternative's
    candidates sit on nodes the pod may use. Framed by `never` or
    `not_now`."""
    return (
        f"{count} device(s) for claim {claim} request {quoted(request)} "
        f"({candidates} candidate(s) on eligible nodes)"
    )


def claims_together(asked: str, constrained: bool) -> str:
    """A DRA pod's claims taken together (`asked`, an `asked` phrase), when
    each request alone could be served but not all at once: with
    `constrained` (some claim has constraints), `... within the claims'
    constraints`. Framed by `never` or `not_now`."""
    return f"{asked} within the claims' constraints" if constrained else asked


def claims_most_free(most: int) -> str:
    """What follows a `not_now` of a `claim_request`: the most of its
    candidates free on one eligible node."""
    return f"at most {most} free on any eligible node"
