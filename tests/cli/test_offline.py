"""The offline responder: labelled, answers from its window, never invents."""

from __future__ import annotations

from loomctx.agent.llm import complete
from loomctx.cli._offline import LABEL, OfflineResponder, answer
from loomctx.messages import Message
from loomctx.tokens import TiktokenCounter

CONTEXT = (
    "Reference context for this turn follows.\n"
    '<context source="L4_semantic" id="a">\n'
    "assistant: The launch moved to April 2. Certification slipped by two weeks.\n"
    "</context>\n"
    '<context source="RAG_knowledge" id="b">\n'
    "Backups run every night at 02:00 and are kept for 35 days.\n"
    "</context>"
)


def test_it_quotes_the_best_sentence_and_the_next_one() -> None:
    reply = answer([Message.system(CONTEXT), Message.user("When is the launch?")])
    assert reply == (
        f"{LABEL} From context `L4_semantic` (assistant): The launch moved to April 2. "
        "Certification slipped by two weeks."
    )


def test_plain_context_blocks_and_history_messages_are_read() -> None:
    reply = answer([Message.system(CONTEXT), Message.user("How long are backups kept?")])
    assert reply.startswith(f"{LABEL} From context `RAG_knowledge`: Backups run every night")
    history = [
        Message.user("Remember that my locker code is 4711."),
        Message.assistant("Noted: your locker code is 4711."),
        Message.user("What is my locker code?"),
    ]
    assert (
        answer(history) == f"{LABEL} From the assistant message: Noted: your locker code is 4711."
    )


def test_questions_and_earlier_offline_replies_are_not_answers() -> None:
    messages = [
        Message.user("What colour is the staging dashboard?"),
        Message.assistant(f"{LABEL} Nothing in my context window matches that question."),
        Message.user("What colour is the staging dashboard?"),
    ]
    assert answer(messages) == f"{LABEL} Nothing in my context window matches that question."


def test_the_users_own_words_lose_ties_to_others() -> None:
    messages = [
        Message.assistant("The office opens at nine."),
        Message.user("I think the office opens at ten."),
        Message.user("When does the office open?"),
    ]
    assert "From the assistant message" in answer(messages)


async def test_it_streams_like_a_provider_with_real_usage() -> None:
    messages = [Message.system(CONTEXT), Message.user("When is the launch?")]
    llm = OfflineResponder()
    response = await complete(llm, messages)
    assert response.text.startswith(LABEL)
    assert response.finish_reason == "stop"
    counter = TiktokenCounter()
    assert response.usage is not None
    assert response.usage.input_tokens == counter.count_messages(messages)
    assert response.usage.output_tokens == counter.count(response.text)


def test_unfenced_context_is_read_line_by_line() -> None:
    context = (
        "Reference context for this turn follows.\n"
        "- assistant: The launch moved to April 2.\n"
        "- Backups run every night\nat 02:00.\n\n"
        "Refunds\n\nDamaged books are refunded without a\nreturn."
    )
    reply = answer([Message.system(context), Message.user("When is the launch?")])
    assert reply == f"{LABEL} From the context (assistant): The launch moved to April 2."
    reply = answer([Message.system(context), Message.user("When do backups run?")])
    assert reply == f"{LABEL} From the context: Backups run every night at 02:00."
    reply = answer([Message.system(context), Message.user("How are damaged books refunded?")])
    assert reply == f"{LABEL} From the context: Damaged books are refunded without a return."


def test_items_of_one_fence_per_source_with_id_tags() -> None:
    context = (
        "Reference context for this turn follows, grouped by source inside <context> tags.\n\n"
        '<context source="L4_semantic">\n'
        "[t1] user: Should we use MongoDB for the inventory service?\n\n"
        "[t2] assistant: The inventory service database is PostgreSQL 16.\n"
        "Stock updates must be transactional.\n"
        "</context>\n\n"
        '<context source="RAG_knowledge">\n'
        "Refunds > Damaged books\n\nA damaged book is refunded\nwithout a return.\n"
        "</context>"
    )
    reply = answer([Message.system(context), Message.user("Which inventory service database?")])
    assert reply == (
        f"{LABEL} From context `L4_semantic` (assistant): The inventory service database is "
        "PostgreSQL 16. Stock updates must be transactional."
    )
    reply = answer([Message.system(context), Message.user("Is a damaged book refunded?")])
    assert (
        reply
        == f"{LABEL} From context `RAG_knowledge`: A damaged book is refunded without a return."
    )
