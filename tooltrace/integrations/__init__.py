"""Framework adapters: every tool call a framework's agent makes runs through a ``ToolRegistry``.

One module per framework, each behind an optional extra (the core never imports them):

- ``tooltrace.integrations.langchain`` (``tooltrace[langchain]``): LangChain 1.x agents and
  LangGraph. ``TooltraceMiddleware`` for ``create_agent`` (``wrap_tool_call`` and
  ``awrap_tool_call``), the same wrappers for ``ToolNode(wrap_tool_call=...)`` (``tool_node``
  builds one), ``as_langchain_tools`` (registry tools as ``StructuredTool``s) and ``adopt``
  (existing LangChain tools registered in the registry).
- ``tooltrace.integrations.providers`` (no extra: no SDK is needed): a hand-written loop on the
  OpenAI, Anthropic or Gemini APIs, or an MCP client. ``tool_specs`` (the visible tools in the
  provider's format), ``call_from``/``acall_from`` (run the provider's tool call as it comes)
  and ``result_message``/``result_turn`` (the provider's tool-result message).
- ``tooltrace.integrations.claude_agent_sdk`` (``tooltrace[claude-agent-sdk]``): the Claude
  Agent SDK. ``ClaudeAgentAdapter``: ``PreToolUse``/``PostToolUse`` hooks and ``can_use_tool``
  that decide and record the CLI's built-in tools (Bash, Read, Write, ...: the CLI runs them,
  so their deadline, cancellation and output trimming are out of reach), an in-process MCP
  server that runs registry tools through the pipeline, ``options()`` wiring all of it;
  ``adopt`` registers the SDK's ``@tool`` functions.
- ``tooltrace.integrations.llamaindex`` (``tooltrace[llamaindex]``): LlamaIndex agents.
  ``TooltraceTool`` (an ``AsyncBaseTool`` whose ``call``/``acall`` run the registry),
  ``as_llamaindex_tools`` (registry tools) and ``adopt`` (existing ``FunctionTool``s and
  ``BaseTool``s registered in the registry).
- ``tooltrace.integrations.pydantic_ai`` (``tooltrace[pydantic-ai]``): Pydantic AI agents.
  ``Tooltrace`` (a capability: the registry's tools, and every other tool call of the agent
  through the registry), ``as_toolset``, ``adopt`` (Pydantic AI tools registered), and
  ``SharedSpans`` (a call takes Pydantic AI's own ``execute_tool`` span: one span per call).
- ``tooltrace.integrations.openai_agents`` (``tooltrace[openai-agents]``): the OpenAI Agents
  SDK. ``as_function_tools`` (registry tools as ``FunctionTool``s) and ``adopt`` (existing
  ``FunctionTool``s registered, copies whose ``on_invoke_tool`` runs the registry);
  ``FrameworkApprover`` answers the registry's approval step from the SDK's interruptions.
- ``tooltrace.integrations.adk`` (``tooltrace[adk]``, a venv of its own): Google ADK agents.
  ``as_adk_tools`` (registry tools as ADK ``BaseTool``s), ``TooltracePlugin`` (a runner plugin
  whose ``before_tool_callback`` runs every other tool call through the registry), ``adopt``
  (existing ADK tools registered), and ``SharedSpans`` (a call takes ADK's ``execute_tool``
  span: one span per call).
- ``tooltrace.integrations.crewai`` (``tooltrace[crewai]``, a venv of its own): CrewAI crews.
  ``as_crewai_tools`` (registry tools as CrewAI ``BaseTool``s whose failures are
  ``ToolFailure``s), ``adopt`` (existing CrewAI tools registered), ``install_guard`` (CrewAI's
  global tool hooks route every other tool call through the registry) and ``akickoff`` (a
  cancelled kickoff cancels its run's calls).

What every adapter guarantees: the tools are registered once, in the registry, and the model
sees their names and schemas; every status other than ``ok`` reaches the model through the
framework's own tool-error path, carrying the envelope's summary; the model sees the redacted,
trimmed result (an offloaded result as its preview and a reference to the artifact); each call
gets one span, a child of the span current where the framework made the call; an asyncio
cancel of the awaiting task becomes ``registry.cancel_call`` and the call is recorded as its
cancel settles. See ``docs/integrations/`` for what each framework leaves unenforced.
"""

__all__: list[str] = []
