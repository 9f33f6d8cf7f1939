"""Modal screens: the `?` key list and the one-line prompt an act asks through (an e-mail, a duration)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from tui.keys import Key


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Any]] = [Binding("escape,question_mark,q", "dismiss", "close")]

    def __init__(self, keys: list[Key], readonly: bool) -> None:
        super().__init__()
        self.keys = keys
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        table.add_column(style="dim")
        group = None
        for label, help_, cli, key_group in self.rows():
            if key_group != group:
                group = key_group
                table.add_row(Text(group, style="bold underline"), "", "")
            table.add_row(label, help_, cli)
        note = "read-only: the acts that change the emulator are hidden" if self.readonly else ""
        with VerticalScroll(id="help"):
            yield Static(table)
            yield Label(Text(note, style="yellow") if note else "")
            yield Label(Text("esc or ? closes this", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#help").border_title = "Keys"

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(keys, what they do, the same as a command, group); the view keys share one row."""
        views = [k for k in self.keys if k.action.startswith("view(")]
        rows = [(k.label, k.help, k.cli or "", k.group) for k in self.keys if k not in views]
        if views:
            what = ", ".join(f"{k.label} {k.help.removeprefix('show ')}" for k in views)
            digits = [k.label for k in views if k.label in "123456789"]
            rest = [k.label for k in views if k.label not in digits]
            keys = " ".join([f"{digits[0]}-{digits[-1]}" if len(digits) > 1 else "".join(digits), *rest]).strip()
            rows.insert(0, (keys, what, "", views[0].group))
        return rows

    def plain(self) -> str:
        """The key list as text (what the screen shows)."""
        return "\n".join(f"{label}  {help_}  {cli}".rstrip() for label, help_, cli, _ in self.rows())


class DetailScreen(ModalScreen[None]):
    """Every field of one row (a registration, a user, a key), each value whole and wrapped; esc closes it."""

    BINDINGS: ClassVar[list[Any]] = [Binding("escape,enter,q", "dismiss", "close")]

    def __init__(self, title: str, fields: list[tuple[str, str | Text]]) -> None:
        super().__init__()
        self.title_text = title
        self.fields = fields

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold", ratio=1)
        for name, value in self.fields:
            table.add_row(name, value)
        with VerticalScroll(id="detail"):
            yield Static(table)
            yield Label(Text("esc or enter closes this", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#detail").border_title = self.title_text

    def plain(self) -> str:
        """The fields as text (what the pane shows, unwrapped)."""
        return "\n".join(f"{name}: {value}" for name, value in self.fields)


class ConfirmScreen(ModalScreen[bool]):
    """Ask before an act that is hard to undo: y or enter confirms, n or esc does not."""

    BINDINGS: ClassVar[list[Any]] = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self.question)
            yield Label(Text("y or enter: yes · n or esc: no", style="dim"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PromptScreen(ModalScreen[str | None]):
    """Ask for one value; enter answers it, esc answers None."""

    BINDINGS: ClassVar[list[Any]] = [Binding("escape", "cancel", "Cancel", show=False)]

    def __init__(self, title: str, value: str, hint: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Label(self.title_text)
            yield Input(value=self.value, id="answer", select_on_focus=True)
            yield Label(Text(self.hint or "enter to confirm · esc to cancel", style="dim"))

    def on_mount(self) -> None:
        answer = self.query_one(Input)
        answer.cursor_blink = False  # steady screenshots; the cursor is visible anyway
        answer.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
