"""The standard wording of `wait` and `reject` reasons, as the SDK's own
placement writes them (`Shortfall.reason`, `Cluster.unplaced`,
`Cluster.place_gang`), byte for byte the Rust SDK's `reason` module. A
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

__all__ = [
    "asked",
    "asked_nvlink",
    "asked_shape",
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
    instance(s) of profile "1g.10gb"`; `devices through DRA claims` for a
    DRA request."""
    ask = request.ask
    if not isinstance(ask, t.Ask_Gpus):
        return "devices through DRA claims"
    return asked_shape(ask.value)


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
