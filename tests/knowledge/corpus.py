"""A small, realistic team handbook in English and Chinese, and questions with their answers."""

from __future__ import annotations

DOCS = {
    "deploy.md": """# Deployment

How code gets from a merged pull request to our users.

## Staging

Every merge to the main branch is built by CI and deployed to staging within ten minutes.
Check the staging dashboard before you announce a change.

## Production

Production releases need two approvals. Run `make release TAG=v1.2.3` from a clean checkout;
the release script tags the build, pushes the images and updates the cluster.

## Rollback

To roll back a bad release, redeploy the previous tag with `make release TAG=<old tag>`.
Database migrations are not reverted automatically: write a down migration first.
""",
    "auth.md": """# Authentication

The public API uses OAuth 2.0 with the client credentials grant. Access tokens expire after
one hour; ask for a new one with your client secret before the old one expires.

## API keys

Legacy API keys are deprecated and stop working on 1 June. Move every integration to OAuth.
""",
    "billing.txt": """Invoices are created on the first day of each month and sent to the billing
contact of the account. Payment is due within 30 days. A late payment adds a fee of 2% per month
to the open amount. Refunds are paid back to the original card within five working days.
""",
    "backup.md": """# 数据库备份

生产数据库每天凌晨三点自动备份，备份文件保存在对象存储中，保留三十天。

## 恢复

从备份恢复需要运维团队审批，整个恢复过程大约需要两个小时。恢复之前先通知所有用户。
""",
    "cache.md": """# 缓存策略

我们使用 Redis 作为缓存，默认过期时间为五分钟。热点数据在发布之后会自动预热。
缓存穿透时，服务直接读取数据库并记录告警。
""",
    "logging.md": """# 日志

所有服务的日志都发送到集中式日志平台，保留九十天。错误日志会触发值班告警，
告警在十五分钟内没有确认就会升级给团队负责人。
""",
}

QUESTIONS = [
    ("How do I roll back a bad release?", "deploy.md", "Deployment > Rollback"),
    ("When do OAuth access tokens expire?", "auth.md", "Authentication"),
    ("Is there a fee for paying an invoice late?", "billing.txt", None),
    ("What happens to legacy API keys?", "auth.md", "Authentication > API keys"),
    ("数据库备份保留多少天？", "backup.md", "数据库备份"),
    ("从备份恢复要多长时间？", "backup.md", "数据库备份 > 恢复"),
    ("Redis 缓存的过期时间是多少", "cache.md", "缓存策略"),
    ("错误日志的告警多久升级", "logging.md", "日志"),
]
"""(question, the document that answers it, the heading path of the answering chunk)."""
