"""tether.models: adapters behind the one seam ``Model.complete``.

``OpenAIChatModel``, ``OpenAIResponsesModel`` and ``AnthropicModel`` are
imported lazily so that ``import tether.models`` does not pull in aiohttp.
"""

from typing import TYPE_CHECKING, Any

from tether.models.base import Model, ModelRequest, ModelSettings

if TYPE_CHECKING:
    from tether.models.anthropic import AnthropicModel
    from tether.models.fallback import FallbackModel
    from tether.models.openai_chat import OpenAIChatModel, WireCompat
    from tether.models.openai_responses import OpenAIResponsesModel
    from tether.models.scripted import ScriptedModel

__all__ = [
    "AnthropicModel",
    "FallbackModel",
    "Model",
    "ModelRequest",
    "ModelSettings",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ScriptedModel",
    "WireCompat",
]


def __getattr__(name: str) -> Any:
    if name == "FallbackModel":  # loaded on first use, like the adapters: an agent of another model never needs it
        from tether.models.fallback import FallbackModel

        return FallbackModel
    if name == "ScriptedModel":
        from tether.models.scripted import ScriptedModel

        return ScriptedModel
    if name in ("OpenAIChatModel", "WireCompat"):
        from tether.models import openai_chat

        return getattr(openai_chat, name)
    if name == "OpenAIResponsesModel":
        from tether.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel
    if name == "AnthropicModel":
        from tether.models.anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(name)
