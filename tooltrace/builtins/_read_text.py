"""``read_text``: read a ``.txt`` file inside the workspace."""

from __future__ import annotations

from typing import Annotated

from ..model import Capability, Effect, Execution, ToolResult, tool
from ..runtime import CallContext

#: Files larger than this return only their head.
LARGE_FILE_BYTES = 20 * 1024
#: How much of a large file is returned.
HEAD_BYTES = 2 * 1024


@tool(
    "read_text",
    capability=Capability.READ,
    effect=Effect.NONE,
    timeout_s=10.0,
    source="builtin",
    path_params=("path",),
    execution=Execution.INLINE,
    group="files",
)
def read_text(
    ctx: CallContext,
    path: Annotated[str, "Workspace-relative path of a .txt file"],
) -> ToolResult:
    """Read a .txt file inside the workspace.

    A file over 20 KB returns its first 2 KB and its original size.
    """
    text, size, rp = ctx.workspace.read_text(
        path, max_bytes=LARGE_FILE_BYTES + 1, allowed_suffixes=(".txt",)
    )
    ctx.set_detail("resolved", rp.relative)
    ctx.set_detail("size_bytes", size)
    if size > LARGE_FILE_BYTES:
        head = text.encode("utf-8")[:HEAD_BYTES].decode("utf-8", "ignore")
        return ToolResult(
            {"text": head, "truncated": True, "size_bytes": size},
            summary=f"read the first {HEAD_BYTES} bytes of {rp.relative} ({size} bytes in all)",
        )
    return ToolResult(
        {"text": text, "truncated": False, "size_bytes": size},
        summary=f"read {rp.relative} ({size} bytes)",
    )
