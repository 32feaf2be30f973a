"""What a tool and a call are: tool definitions and ``@tool``, the call, its principal, the
record and the result envelope, the closed status sets, argument validation, the tool table.

The names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._envelope import Artifact as Artifact
    from ._envelope import CallRecord as CallRecord
    from ._envelope import CallStatus as CallStatus
    from ._envelope import Principal as Principal
    from ._envelope import ProgressMark as ProgressMark
    from ._envelope import Retry as Retry
    from ._envelope import Stage as Stage
    from ._envelope import Status as Status
    from ._envelope import Step as Step
    from ._envelope import StepName as StepName
    from ._envelope import Timing as Timing
    from ._envelope import ToolCall as ToolCall
    from ._envelope import ToolResultEnvelope as ToolResultEnvelope
    from ._listing import GroupLine as GroupLine
    from ._listing import ToolListing as ToolListing
    from ._listing import plain as plain
    from ._listing import tool_listing as tool_listing
    from ._principals import RunPrincipals as RunPrincipals
    from ._principals import principal_problem as principal_problem
    from ._tool import NAME_RE as NAME_RE
    from ._tool import Capability as Capability
    from ._tool import Effect as Effect
    from ._tool import Execution as Execution
    from ._tool import FunctionTool as FunctionTool
    from ._tool import ToolDefinition as ToolDefinition
    from ._tool import ToolResult as ToolResult
    from ._tool import tool as tool
    from ._tooltable import Entry as Entry
    from ._tooltable import Resolution as Resolution
    from ._tooltable import ToolTable as ToolTable
    from ._tooltable import Visibility as Visibility
    from ._tooltable import make_entry as make_entry
    from ._validation import ArgumentsError as ArgumentsError
    from ._validation import CompiledSchema as CompiledSchema
    from ._validation import compile_schema as compile_schema
    from ._validation import parse_tool_call as parse_tool_call

_PUBLIC: dict[str, str] = {
    "Entry": "._tooltable",
    "NAME_RE": "._tool",
    "RunPrincipals": "._principals",
    "ToolTable": "._tooltable",
    "make_entry": "._tooltable",
    "plain": "._listing",
    "principal_problem": "._principals",
    "tool_listing": "._listing",
    "Artifact": "._envelope",
    "CallRecord": "._envelope",
    "CallStatus": "._envelope",
    "Principal": "._envelope",
    "ProgressMark": "._envelope",
    "Retry": "._envelope",
    "Stage": "._envelope",
    "Status": "._envelope",
    "Step": "._envelope",
    "StepName": "._envelope",
    "Timing": "._envelope",
    "ToolCall": "._envelope",
    "ToolResultEnvelope": "._envelope",
    "GroupLine": "._listing",
    "ToolListing": "._listing",
    "Capability": "._tool",
    "Effect": "._tool",
    "Execution": "._tool",
    "FunctionTool": "._tool",
    "ToolDefinition": "._tool",
    "ToolResult": "._tool",
    "tool": "._tool",
    "Resolution": "._tooltable",
    "Visibility": "._tooltable",
    "ArgumentsError": "._validation",
    "CompiledSchema": "._validation",
    "compile_schema": "._validation",
    "parse_tool_call": "._validation",
}

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())

__all__ = sorted(_PUBLIC)
