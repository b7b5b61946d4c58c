"""A permission prompt, a question form and live tool cards, rendered from the event stream alone.

The UI below never queries the supervisor: everything it draws comes from ``ask.requested`` (the
prompt: tool, call id, title, command, options, questions) and ``run.part.updated`` (the card: its
label, whether the tool started, and the note the model is told). It answers each prompt by its ask
id, as soon as the prompt appears -- the ask is registered before its event, so that never misses.

    python docs/examples/ask_prompts.py
"""

from __future__ import annotations

from run_supervisor import RunContext, Supervisor, SupervisorConfig
from run_supervisor.protocol import AskKind, AskRequested, Event, RunPartUpdated


def render_prompt(ask: AskRequested) -> str:
    """A permission prompt or a question form, from its ``ask.requested`` event."""
    payload = ask.payload
    lines = [f"? {ask.tool} ({ask.call_id}): {payload.title or ask.kind.value}"]
    if payload.command:
        lines.append(f"    $ {payload.command}")
    if payload.options:
        lines.append("    " + "  ".join(f"[{option}]" for option in payload.options))
    for number, question in enumerate(payload.questions, 1):
        lines.append(f"    {number}. {question.question}" + (" (any)" if question.multiple else ""))
        lines.extend(f"       ( ) {option}" for option in question.options)
    return "\n".join(lines)


def render_card(part: RunPartUpdated) -> str:
    """A tool card, from its latest ``run.part.updated`` event."""
    ran = "ran" if part.tool_started else "not started"
    line = f"# {part.call_id:<10} {part.label}  [{ran}]"
    return line + (f"\n    model is told: {part.note}" if part.note else "")


class PromptUI:
    """Draws what the events say and plays the user: declines the push, answers the form."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def on_event(self, event: Event) -> None:
        if isinstance(event, RunPartUpdated):
            print(render_card(event))
        elif isinstance(event, AskRequested):
            print(render_prompt(event))
            if event.kind is AskKind.PERMISSION:
                print("  user: reject -- Push to a branch, not main.")
                self.sup.reply_permission(event.ask_id, approve=False, message="Push to a branch, not main.")
            else:
                print("  user: origin; yes")
                self.sup.answer_form(event.ask_id, answer="origin; yes")


def assistant_turn(ctx: RunContext) -> None:
    bash = ctx.tool("bash", call_id="toolu_01")
    bash.prepared()  # the call is complete; ask before the tool does anything
    reply = bash.ask_permission(
        timeout=10,
        title="Run this command?",
        command="git push origin main",
        options=["once", "always", "reject"],
    )
    if reply.approved:
        bash.running()  # (a real tool runs the command here)
        bash.completed()
    question = ctx.tool("question", call_id="toolu_02")
    question.prepared()
    question.running()
    question.ask_form(
        timeout=10,
        title="Before I push to a branch",
        questions=[
            {"question": "Which remote?", "options": ["origin", "backup"]},
            {"question": "Run the tests first?", "options": ["yes", "no"]},
        ],
    )
    question.completed()


def main() -> None:
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/proj/a"]) as sup:
        subscription = sup.subscribe(callback=PromptUI(sup).on_event)
        run = sup.start_run(assistant_turn, session="s1", directory="/proj/a")
        outcome = run.wait(timeout=10).outcome
        subscription.close()  # the UI draws every event up to run.finished first
        print(f"run: {outcome.value}")


if __name__ == "__main__":
    main()
