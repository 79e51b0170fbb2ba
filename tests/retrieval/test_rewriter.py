"""QueryRewriter (seed 002): the query plus the frequent content words of recent messages."""

from __future__ import annotations

import pytest
import rjieba
from hypothesis import given
from hypothesis import strategies as st

from loomctx.errors import ConfigError
from loomctx.retrieval import QueryRewriter
from loomctx.retrieval.rewriter import chinese_words
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
    # Five content words in all: bigrams used to pad the list with 要注 and 意安.
    assert rewriter.keywords("认证方案", OAUTH_CHAT) == [
        "OAuth2",
        "安全",
        "token",
        "注意安全",
        "API",
    ]


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
    # "要注意安全" is the words 要 and 注意安全: the single character is not added.
    assert QueryRewriter(top_k=2).keywords("认证方案", recent) == ["OAuth2", "注意安全"]
    # Two Latin words of one mixed run were both added as that run.
    assert QueryRewriter().rewrite("q", ["abc你好xyz"]) == "q [xyz 你好 abc]"


# Chinese conversations: the rewrite adds whole words (as jieba cuts the messages), never
# fragments across word boundaries (证方 of 认证方案, 论认 of 论证 认证) or single characters.
BILINGUAL = [
    (
        "年假怎么算",
        [
            "员工每年享有十五天带薪年假，未休完的年假可以顺延到下一年第一季度。",
            "请假需要提前两周在人事系统中提交申请。",
        ],
        "年假怎么算 [申请 提交 系统 人事 两周 提前]",
    ),
    (
        "方案",
        ["论证方法和认证方案都要写清楚", "认证方案需要评审"],
        "方案 [认证 评审 清楚 方法 论证]",
    ),
    (
        "数据库迁移",
        ["数据库迁移到 PostgreSQL 16 的计划定在五月，由 DBA 团队负责。", "迁移前要备份数据库"],
        "数据库迁移 [备份 负责 团队 DBA 五月 计划]",
    ),
    ("q", ["下周三下午三点在三楼会议室开项目评审会。"], "q [评审会 项目 会议室 三点 下午 周三]"),
    (
        "refresh token 多久过期",
        ["access token 的有效期是一小时，过期后客户端用 refresh token 换取新的 token。"],
        "refresh token 多久过期 [换取 客户端 小时 有效期 access]",
    ),
]


@pytest.mark.parametrize(("query", "recent", "expected"), BILINGUAL)
def test_bilingual_rewrites_add_real_words(query: str, recent: list[str], expected: str) -> None:
    rewritten = QueryRewriter().rewrite(query, recent)
    assert rewritten == expected
    cut = {w for m in recent for w in chinese_words(m)}
    for word in QueryRewriter().keywords(query, recent):
        assert word.isascii() or (word in cut and len(word) >= 2)
        # A word of jieba's dictionary, not one its HMM made up (前要 of 迁移前要备份).
        assert word.isascii() or rjieba.has_word(word)
    for fragment in ("证方", "论认", "法和", "交申", "评审会 审会", "前要", "前 ", "年 "):
        assert fragment not in rewritten


def test_chinese_words_drop_stop_words_and_single_characters() -> None:
    assert chinese_words("我们的 API 都用 OAuth2 认证。") == ["认证"]
    assert chinese_words("no Chinese here") == []
    assert chinese_words("请问这个数据库在哪里") == ["数据库"]


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
