"""Word statistics of a text: a skillbox tool written in Python.

Built into a WebAssembly component with componentize-py (see
docs/authoring.md); skillbox derives the tool's JSON schema from the WIT
world in wit/wordcount.
"""

from typing import Optional

import wit_world


class WitWorld(wit_world.WitWorld):
    def count_words(self, text: str, min_length: Optional[int]) -> wit_world.Counts:
        floor = min_length or 1
        words = [w for w in text.split() if len(w) >= floor]
        longest = max(words, key=len) if words else None
        return wit_world.Counts(words=len(words), lines=len(text.splitlines()), longest=longest)
