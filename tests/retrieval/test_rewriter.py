"""QueryRewriter (seed 002): the query plus the frequent content words of recent messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.errors import ConfigError
from loomctx.retrieval import QueryRewriter
from loomctx.text import terms

OAUTH_CHAT = [
    "我们的 API 都用 OAuth2 认证。",
    "OAuth2 的 token 要注意安全。",
    "那 OAuth2 token 的安全呢？",
]


def test_seed_002_example() -> None:
    # OAuth2 three times; token and 安全 twice each, 安全 seen last: it goes first of the two.
    rewriter = QueryRewriter(top_k=3)
    assert rewriter.rewrite("认证方案", OAUTH_CHAT) == "认证方案 [OAuth2 安全 token]"


def test_defaults_are_the_seeds() -> None:
    rewriter = QueryRewriter()
    assert (rewriter.window, rewriter.top_k) == (5, 6)
    assert rewriter.keywords("认证方案", OAUTH_CHAT)[:3] == ["OAuth2", "安全", "token"]
    assert len(rewriter.keywords("认证方案", OAUTH_CHAT)) == 6


def test_only_the_last_window_messages_count() -> None:
    recent = ["kafka kafka kafka kafka", "redis", "postgres"]
    assert QueryRewriter(window=2).keywords("cache", recent) == ["postgres", "redis"]
    assert QueryRewriter(window=3).keywords("cache", recent) == ["kafka", "postgres", "redis"]


def test_top_k_most_frequent_first() -> None:
    recent = ["invoice invoice invoice ledger ledger audit", "ledger export"]
    assert QueryRewriter(top_k=2).keywords("q", recent) == ["ledger", "invoice"]
    assert QueryRewriter(top_k=1).rewrite("q", recent) == "q [ledger]"


def test_ties_go_to_the_most_recent_word() -> None:
    recent = ["alpha beta", "gamma", "delta"]
    assert QueryRewriter().keywords("q", recent) == ["delta", "gamma", "beta", "alpha"]


def test_words_of_the_query_are_skipped_with_their_stemmed_variants() -> None:
    recent = ["The deployment failed", "deploying again", "deployed fine", "Tokens expired"]
    words = QueryRewriter().keywords("deploy the token", recent)
    assert words == ["expired", "fine", "failed"]
    assert "安全" not in QueryRewriter().keywords("安全方案", ["安全 安全 审计"])


def test_stop_words_of_both_languages_are_skipped() -> None:
    recent = ["what is the status of it, and would you check it", "我们 这个 你们 什么 的 了 吗"]
    assert QueryRewriter().keywords("q", recent) == ["check", "status"]
    assert QueryRewriter().rewrite("q", ["the and of", "我们 的 了"]) == "q"


def test_words_keep_their_first_spelling() -> None:
    recent = ["Kubernetes pods", "kubernetes nodes"]
    assert QueryRewriter().keywords("q", recent) == ["Kubernetes", "nodes", "pods"]


def test_no_recent_messages_leave_the_query_unchanged() -> None:
    rewriter = QueryRewriter()
    assert rewriter.rewrite("认证方案", []) == "认证方案"
    assert rewriter.keywords("认证方案", []) == []
    # Nothing new to add: every recent word is in the query already.
    assert rewriter.rewrite("refresh tokens", ["Tokens refreshed", "token refresh"]) == (
        "refresh tokens"
    )


@pytest.mark.parametrize("name", ["window", "top_k"])
@pytest.mark.parametrize("value", [0, -1, 2.5, "5", True, None])
def test_bad_parameters(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"`{name}` must be an int >= 1"):
        QueryRewriter(**{name: value})  # type: ignore[arg-type]


def test_a_latin_word_inside_chinese_text_is_added_alone() -> None:
    recent = ["我们用OAuth2做认证", "OAuth2的token要注意安全"]
    assert QueryRewriter(top_k=2).keywords("认证方案", recent) == ["OAuth2", "安全"]
    # Two Latin words of one mixed run were both added as that run.
    assert QueryRewriter().rewrite("q", ["abc你好xyz"]) == "q [xyz 好 abc]"


WORDS = st.sampled_from(
    [
        "OAuth2",
        "token",
        "tokens",
        "安全",
        "认证",
        "the",
        "和",
        "deploy",
        "deployed",
        "数据库",
        "Kafka",
        "kafka",
        "42",
        "。",
        "!",
    ]
)
# Words separated by spaces: mixed runs such as "abc你好xyz" hit the bug above.
MESSAGE = st.lists(WORDS, max_size=12).map(" ".join)


@given(
    query=MESSAGE,
    recent=st.lists(MESSAGE, max_size=8),
    window=st.integers(1, 6),
    top_k=st.integers(1, 7),
)
def test_the_rewrite_starts_with_the_query_and_adds_at_most_top_k_new_words(
    query: str, recent: list[str], window: int, top_k: int
) -> None:
    rewriter = QueryRewriter(window=window, top_k=top_k)
    words = rewriter.keywords(query, recent)
    rewritten = rewriter.rewrite(query, recent)
    assert rewritten.startswith(query)
    assert len(words) <= top_k
    assert len(set(words)) == len(words)
    assert rewritten == (f"{query} [{' '.join(words)}]" if words else query)
    # Every added word comes from the window and is not a term of the query.
    window_terms = {t for m in recent[-window:] for t in terms(m)}
    known = set(terms(query))
    for word in words:
        assert set(terms(word)) & window_terms
        assert not set(terms(word)) <= known
