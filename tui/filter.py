"""The `/` filter, k9s style: a case-insensitive regular expression; a leading `!` keeps what does NOT match.

Text that is not a valid expression is matched literally, so typing `agent-(` never errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RowFilter:
    text: str = ""

    @property
    def inverse(self) -> bool:
        return self.text.startswith("!")

    @property
    def pattern(self) -> str:
        return self.text[1:].strip() if self.inverse else self.text.strip()

    def __bool__(self) -> bool:
        return bool(self.pattern)

    def _regex(self) -> re.Pattern[str]:
        try:
            return re.compile(self.pattern, re.IGNORECASE)
        except re.error:
            return re.compile(re.escape(self.pattern), re.IGNORECASE)

    def keeps(self, text: str) -> bool:
        if not self:
            return True
        return (self._regex().search(text) is None) == self.inverse

    def apply(self, lines: list[str]) -> list[str]:
        if not self:
            return lines
        regex, inverse = self._regex(), self.inverse
        return [line for line in lines if (regex.search(line) is None) == inverse]

    def describe(self) -> str:
        return f"not /{self.pattern}/" if self.inverse else f"/{self.pattern}/"
