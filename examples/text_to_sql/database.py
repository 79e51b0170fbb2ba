"""A realistic online shop in one SQLite file: 18 tables, generated deterministically.

`TABLES` is the one description of the schema: the DDL is generated from it, and so is the
documentation the schema retriever ranks (`schema.py`). Each table says what it holds in
English, with the Chinese words people use for it, so questions in either language find it.
`create_database(path, seed=7)` writes the same rows for the same seed; the data runs up to
`TODAY`, which questions about "the last 7 days" mean.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

__all__ = ["TABLES", "TODAY", "Column", "Table", "create_database"]

TODAY = date(2025, 6, 30)
"""The last day with data: "recent" questions are relative to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """A column: its SQLite type, what it means, and the column it references, if any."""

    name: str
    type: str
    meaning: str
    references: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table: what it holds (`about`, English and Chinese) and its columns."""

    name: str
    about: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ("id",)

    def ddl(self) -> str:
        """The CREATE TABLE statement."""
        lines = [f"{c.name} {c.type}" for c in self.columns]
        lines.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        for c in self.columns:
            if c.references:
                table, column = c.references.split(".")
                lines.append(f"FOREIGN KEY ({c.name}) REFERENCES {table}({column})")
        return f"CREATE TABLE {self.name} (\n  " + ",\n  ".join(lines) + "\n)"


def _c(name: str, type_: str, meaning: str, references: str = "") -> Column:
    return Column(name=name, type=type_, meaning=meaning, references=references)


ID = _c("id", "INTEGER", "Row id.")
TABLES: tuple[Table, ...] = (
    Table(name="customers", about="People with an account at the shop (客户, 顾客).", columns=(
        ID,
        _c("email", "TEXT", "Login and contact address; unique."),
        _c("first_name", "TEXT", "Given name."),
        _c("last_name", "TEXT", "Family name."),
        _c("country", "TEXT", "ISO country code of the billing address."),
        _c("city", "TEXT", "City of the billing address."),
        _c("signed_up_on", "TEXT", "Date the account was created (YYYY-MM-DD)."),
        _c("segment", "TEXT", "Marketing segment: 'consumer', 'small_business' or 'enterprise'."),
        _c("marketing_opt_in", "INTEGER", "1 if the customer accepts marketing email."),
    )),
    Table(name="orders", about="Orders placed by customers, with their totals; sales and "
          "revenue come from here (订单, 销售额, 销售, 下单, 购买).", columns=(
        ID,
        _c("customer_id", "INTEGER", "Who ordered.", "customers.id"),
        _c("ordered_at", "TEXT", "When the order was placed (YYYY-MM-DD HH:MM:SS)."),
        _c("status", "TEXT", "'placed', 'paid', 'shipped', 'delivered' or 'cancelled'; "
           "cancelled orders are not sales."),
        _c("channel", "TEXT", "Where it was placed: 'web', 'app' or 'marketplace'."),
        _c("promotion_id", "INTEGER", "Promotion applied, or NULL.", "promotions.id"),
        _c("shipping_address_id", "INTEGER", "Where it ships.", "addresses.id"),
        _c("subtotal_cents", "INTEGER", "Sum of the items before discounts, in cents."),
        _c("discount_cents", "INTEGER", "Discount from the promotion, in cents."),
        _c("shipping_cents", "INTEGER", "Shipping fee charged, in cents."),
        _c("total_cents", "INTEGER", "What the customer pays: subtotal - discount + shipping."),
    )),
    Table(name="order_items", about="The lines of an order: which product, how many, at "
          "what price (订单明细, 商品数量).", columns=(
        ID,
        _c("order_id", "INTEGER", "The order this line belongs to.", "orders.id"),
        _c("product_id", "INTEGER", "The product bought.", "products.id"),
        _c("quantity", "INTEGER", "Units bought."),
        _c("unit_price_cents", "INTEGER", "Price of one unit when ordered, in cents."),
    )),
    Table(name="products", about="The catalogue: what the shop sells (商品, 产品).", columns=(
        ID,
        _c("sku", "TEXT", "Stock keeping unit code, e.g. 'KT-0042'."),
        _c("name", "TEXT", "Product name as shown in the shop."),
        _c("category_id", "INTEGER", "Its category.", "categories.id"),
        _c("supplier_id", "INTEGER", "Who supplies it.", "suppliers.id"),
        _c("unit_price_cents", "INTEGER", "Current list price, in cents."),
        _c("cost_cents", "INTEGER", "What the shop pays the supplier per unit, in cents."),
        _c("weight_grams", "INTEGER", "Shipping weight."),
        _c("launched_on", "TEXT", "Date it went on sale."),
        _c("is_active", "INTEGER", "1 while it is sold, 0 once discontinued."),
    )),
    Table(name="categories", about="Product categories, in a two-level tree (商品分类, 类目).",
          columns=(
        ID,
        _c("name", "TEXT", "Category name, e.g. 'Kitchen'."),
        _c("parent_id", "INTEGER", "Parent category, NULL for a top level.", "categories.id"),
    )),
    Table(name="reviews", about="Ratings and written reviews of products by customers "
          "(评价, 评论, 评分).", columns=(
        ID,
        _c("product_id", "INTEGER", "The product reviewed.", "products.id"),
        _c("customer_id", "INTEGER", "The reviewer.", "customers.id"),
        _c("rating", "INTEGER", "Stars, 1 to 5."),
        _c("title", "TEXT", "Headline of the review."),
        _c("created_on", "TEXT", "Date written."),
        _c("verified_purchase", "INTEGER", "1 if the reviewer bought the product here."),
    )),
    Table(name="returns", about="Items customers sent back, and the refunds for them "
          "(退货, 退款).", columns=(
        ID,
        _c("order_item_id", "INTEGER", "The order line sent back.", "order_items.id"),
        _c("requested_on", "TEXT", "Date the return was requested."),
        _c("reason", "TEXT", "'damaged', 'wrong_size', 'not_as_described' or 'changed_mind'."),
        _c("status", "TEXT", "'requested', 'received', 'refunded' or 'rejected'."),
        _c("refund_cents", "INTEGER", "Amount refunded, in cents (0 until refunded)."),
        _c("restocked", "INTEGER", "1 if the item went back into inventory."),
    )),
    Table(name="payments", about="Payments taken for orders (支付, 付款).", columns=(
        ID,
        _c("order_id", "INTEGER", "The order paid.", "orders.id"),
        _c("method", "TEXT", "'card', 'paypal', 'alipay' or 'bank_transfer'."),
        _c("amount_cents", "INTEGER", "Amount charged, in cents."),
        _c("paid_at", "TEXT", "When the payment went through (YYYY-MM-DD HH:MM:SS)."),
        _c("status", "TEXT", "'captured', 'failed' or 'refunded'."),
    )),
    Table(name="shipments", about="Parcels sent for orders and their delivery "
          "(发货, 物流, 配送).", columns=(
        ID,
        _c("order_id", "INTEGER", "The order shipped.", "orders.id"),
        _c("warehouse_id", "INTEGER", "Shipped from.", "warehouses.id"),
        _c("carrier", "TEXT", "'DHL', 'UPS', 'SF Express' or 'PostNL'."),
        _c("tracking_number", "TEXT", "The carrier's tracking code."),
        _c("shipped_on", "TEXT", "Date handed to the carrier."),
        _c("delivered_on", "TEXT", "Date delivered, NULL while in transit."),
    )),
    Table(name="promotions", about="Discount campaigns and coupon codes (促销, 优惠券, 折扣).",
          columns=(
        ID,
        _c("code", "TEXT", "Coupon code customers enter, e.g. 'SUMMER10'."),
        _c("discount_percent", "INTEGER", "Percent off the subtotal."),
        _c("starts_on", "TEXT", "First day valid."),
        _c("ends_on", "TEXT", "Last day valid."),
        _c("channel", "TEXT", "Where it applies: 'all', 'web' or 'app'."),
    )),
    Table(name="suppliers", about="Companies the shop buys its products from (供应商).", columns=(
        ID,
        _c("name", "TEXT", "Company name."),
        _c("country", "TEXT", "ISO country code."),
        _c("lead_time_days", "INTEGER", "Days from purchase order to delivery at a warehouse."),
        _c("rating", "REAL", "Internal reliability score, 1.0 to 5.0."),
    )),
    Table(name="warehouses", about="Where stock is kept and shipped from (仓库).", columns=(
        ID,
        _c("code", "TEXT", "Short code, e.g. 'AMS1'."),
        _c("city", "TEXT", "City."),
        _c("country", "TEXT", "ISO country code."),
        _c("capacity_units", "INTEGER", "How many units fit."),
    )),
    Table(name="inventory", about="Stock on hand per product and warehouse (库存).",
          primary_key=("product_id", "warehouse_id"), columns=(
        _c("product_id", "INTEGER", "The product.", "products.id"),
        _c("warehouse_id", "INTEGER", "The warehouse.", "warehouses.id"),
        _c("quantity_on_hand", "INTEGER", "Units in stock at the last count."),
        _c("reorder_level", "INTEGER", "Reorder from the supplier below this many units."),
        _c("last_counted_on", "TEXT", "Date of the last stock count."),
    )),
    Table(name="price_changes", about="History of list price changes (价格变动, 调价).",
          columns=(
        ID,
        _c("product_id", "INTEGER", "The product.", "products.id"),
        _c("changed_on", "TEXT", "Date the new price took effect."),
        _c("old_price_cents", "INTEGER", "Price before, in cents."),
        _c("new_price_cents", "INTEGER", "Price after, in cents."),
    )),
    Table(name="addresses", about="Shipping and billing addresses of customers (地址).",
          columns=(
        ID,
        _c("customer_id", "INTEGER", "Whose address.", "customers.id"),
        _c("kind", "TEXT", "'shipping' or 'billing'."),
        _c("city", "TEXT", "City."),
        _c("postal_code", "TEXT", "Postal code."),
        _c("country", "TEXT", "ISO country code."),
    )),
    Table(name="loyalty_accounts", about="Membership tiers and points (会员, 积分).",
          primary_key=("customer_id",), columns=(
        _c("customer_id", "INTEGER", "The member.", "customers.id"),
        _c("tier", "TEXT", "'bronze', 'silver', 'gold' or 'platinum'."),
        _c("points_balance", "INTEGER", "Points that can be spent now."),
        _c("joined_on", "TEXT", "Date the customer joined the programme."),
    )),
    Table(name="support_tickets", about="Customer service conversations and complaints "
          "(客服, 工单, 投诉).", columns=(
        ID,
        _c("customer_id", "INTEGER", "Who asked.", "customers.id"),
        _c("order_id", "INTEGER", "The order it is about, or NULL.", "orders.id"),
        _c("opened_at", "TEXT", "When the ticket was opened (YYYY-MM-DD HH:MM:SS)."),
        _c("topic", "TEXT", "'delivery', 'payment', 'product', 'account' or 'refund'."),
        _c("satisfaction", "INTEGER", "Survey score 1 to 5 after closing, NULL if none."),
    )),
    Table(name="web_sessions", about="Visits to the web shop and app, and whether they led to "
          "an order (访问, 流量, 转化).", columns=(
        ID,
        _c("customer_id", "INTEGER", "Signed-in visitor, NULL if anonymous.", "customers.id"),
        _c("started_at", "TEXT", "When the visit began (YYYY-MM-DD HH:MM:SS)."),
        _c("device", "TEXT", "'desktop', 'mobile' or 'tablet'."),
        _c("traffic_source", "TEXT", "'search', 'ads', 'email', 'social' or 'direct'."),
        _c("pages_viewed", "INTEGER", "Pages seen in the visit."),
        _c("order_id", "INTEGER", "The order placed during the visit, or NULL.", "orders.id"),
    )),
)  # fmt: skip

_FIRST = "Ana Ben Chen Dara Eli Fang Gus Hana Ivo Jin Kai Lena Mei Noor Omar Pia Raj Sara Tao"
_LAST = "Silva Meyer Wang Novak Jensen Li Rossi Tanaka Kaya Moreau Zhang Haddad Berg Costa"
_CITIES = [
    ("NL", "Amsterdam"),
    ("NL", "Utrecht"),
    ("DE", "Berlin"),
    ("DE", "Munich"),
    ("CN", "Shanghai"),
    ("CN", "Shenzhen"),
    ("US", "Austin"),
    ("US", "Seattle"),
    ("FR", "Lyon"),
    ("FR", "Paris"),
]
_WAREHOUSES = [("AMS1", "Amsterdam", "NL"), ("BER1", "Berlin", "DE"), ("SHA1", "Shanghai", "CN")]
_SUPPLIERS = [
    ("Hollandware", "NL"),
    ("Kessler GmbH", "DE"),
    ("Lumen & Co", "FR"),
    ("Pearl River Goods", "CN"),
    ("Trailhead Supply", "US"),
    ("Atelier Lin", "CN"),
]
_PRODUCTS = {  # top category -> subcategory -> product nouns
    "Kitchen": {
        "Cookware": ["Frying Pan", "Saucepan", "Dutch Oven"],
        "Knives": ["Chef Knife", "Paring Knife", "Bread Knife"],
        "Coffee": ["Pour-Over Kettle", "Burr Grinder", "French Press"],
    },
    "Home": {
        "Lighting": ["Desk Lamp", "Floor Lamp", "String Lights"],
        "Textiles": ["Linen Throw", "Wool Blanket", "Cotton Towels"],
        "Storage": ["Pantry Jars", "Shelf Baskets", "Drawer Dividers"],
    },
    "Outdoor": {
        "Camping": ["Tent Lantern", "Camp Stove", "Sleeping Mat"],
        "Garden": ["Pruning Shears", "Watering Can", "Planter Box"],
    },
}
_ADJECTIVES = ["Classic", "Compact", "Pro", "Nordic", "Everyday"]
_PROMOTIONS = [  # code, percent off, days valid, channel
    ("WELCOME10", 10, 365, "all"),
    ("SPRING15", 15, 30, "web"),
    ("APPONLY20", 20, 14, "app"),
    ("SUMMER10", 10, 45, "all"),
    ("BLACKFRIDAY30", 30, 4, "all"),
]
_REVIEW_TITLES = [
    "Broke within a week",
    "Not as described",
    "Does the job",
    "Very good value",
    "Love it, would buy again",
]
_CUSTOMERS = 600
_ORDERS = 3200
_FIRST_DAY = TODAY - timedelta(days=364)

Rows = dict[str, list[tuple[object, ...]]]


def _day(first: date, rng: random.Random, days: int) -> date:
    return first + timedelta(days=rng.randrange(days))


def _at(day: date, rng: random.Random) -> str:
    moment = datetime(day.year, day.month, day.day, rng.randrange(7, 23), rng.randrange(60))
    return moment.isoformat(sep=" ")


def _add(rows: Rows, table: str, *values: object) -> int:
    """Append a row whose id is the next one, and return that id."""
    row_id = len(rows[table]) + 1
    rows[table].append((row_id, *values))
    return row_id


def _catalogue(rows: Rows, rng: random.Random) -> list[int]:
    """Warehouses, suppliers, categories, products, stock and price history; the prices."""
    for code, city, country in _WAREHOUSES:
        _add(rows, "warehouses", code, city, country, 50_000)
    for name, country in _SUPPLIERS:
        _add(rows, "suppliers", name, country, rng.randrange(5, 40), round(rng.uniform(2.5, 5), 1))
    prices: list[int] = []
    for top, subcategories in _PRODUCTS.items():
        top_id = _add(rows, "categories", top, None)
        for sub, nouns in subcategories.items():
            sub_id = _add(rows, "categories", sub, top_id)
            for noun in nouns:
                for adjective in rng.sample(_ADJECTIVES, 3):
                    price = rng.randrange(8, 180) * 100 - 1
                    launched = _day(_FIRST_DAY - timedelta(days=700), rng, 700)
                    pid = len(rows["products"]) + 1
                    _add(
                        rows,
                        "products",
                        f"{sub[:2].upper()}-{pid:04d}",
                        f"{adjective} {noun}",
                        sub_id,
                        rng.randrange(1, len(_SUPPLIERS) + 1),
                        price,
                        int(price * rng.uniform(0.35, 0.6)),
                        rng.randrange(150, 4000),
                        launched.isoformat(),
                        int(rng.random() > 0.08),
                    )
                    prices.append(price)
                    for warehouse in range(1, len(_WAREHOUSES) + 1):
                        rows["inventory"].append(
                            (
                                pid,
                                warehouse,
                                rng.randrange(0, 400),
                                rng.choice([20, 40, 60]),
                                TODAY.isoformat(),
                            )
                        )
                    if rng.random() < 0.3:
                        new = int(price * rng.choice([0.9, 1.05, 1.1]))
                        changed = _day(_FIRST_DAY, rng, 365).isoformat()
                        _add(rows, "price_changes", pid, changed, price, new)
    for code, percent, days, channel in _PROMOTIONS:
        first = _FIRST_DAY if days == 365 else _day(_FIRST_DAY, rng, 365 - days)
        last = first + timedelta(days=days - 1)
        _add(rows, "promotions", code, percent, first.isoformat(), last.isoformat(), channel)
    return prices


def _customers(rows: Rows, rng: random.Random) -> None:
    first_names, last_names = _FIRST.split(), _LAST.split()
    for cid in range(1, _CUSTOMERS + 1):
        first, last = rng.choice(first_names), rng.choice(last_names)
        country, city = rng.choice(_CITIES)
        signed = _day(_FIRST_DAY - timedelta(days=900), rng, 1200).isoformat()
        segment = rng.choices(["consumer", "small_business", "enterprise"], [80, 15, 5])[0]
        email = f"{first}.{last}{cid}@example.com".lower()
        _add(
            rows,
            "customers",
            email,
            first,
            last,
            country,
            city,
            signed,
            segment,
            int(rng.random() < 0.6),
        )
        _add(rows, "addresses", cid, "shipping", city, str(rng.randrange(1000, 9999)), country)
        if rng.random() < 0.45:
            tier = rng.choices(["bronze", "silver", "gold", "platinum"], [50, 30, 15, 5])[0]
            rows["loyalty_accounts"].append((cid, tier, rng.randrange(0, 5000), signed))


def _order(rows: Rows, rng: random.Random, prices: list[int]) -> None:
    """One order with its items, and what followed: payment, shipment, returns, reviews."""
    cid = rng.randrange(1, _CUSTOMERS + 1)
    day = _day(_FIRST_DAY, rng, 365)
    status = rng.choices(
        ["delivered", "shipped", "paid", "placed", "cancelled"], [78, 6, 4, 2, 10]
    )[0]
    if status == "delivered" and (TODAY - day).days < 3:
        status = "paid"
    lines = []
    for _ in range(rng.choices([1, 2, 3, 4], [50, 30, 15, 5])[0]):
        pid = rng.randrange(1, len(prices) + 1)
        lines.append((pid, rng.choices([1, 2, 3], [80, 15, 5])[0], prices[pid - 1]))
    subtotal = sum(quantity * price for _, quantity, price in lines)
    promotion = rng.randrange(1, len(_PROMOTIONS) + 1) if rng.random() < 0.2 else None
    discount = subtotal * _PROMOTIONS[promotion - 1][1] // 100 if promotion else 0
    shipping = 0 if subtotal > 5000 else 495
    total = subtotal - discount + shipping
    channel = rng.choices(["web", "app", "marketplace"], [55, 35, 10])[0]
    oid = _add(
        rows,
        "orders",
        cid,
        _at(day, rng),
        status,
        channel,
        promotion,
        cid,
        subtotal,
        discount,
        shipping,
        total,
    )
    for pid, quantity, price in lines:
        item = _add(rows, "order_items", oid, pid, quantity, price)
        if status == "delivered" and rng.random() < 0.07:
            requested = min(day + timedelta(days=rng.randrange(5, 30)), TODAY).isoformat()
            reason = rng.choice(["damaged", "wrong_size", "not_as_described", "changed_mind"])
            state = rng.choices(
                ["refunded", "received", "requested", "rejected"], [70, 10, 10, 10]
            )[0]
            refund = quantity * price if state == "refunded" else 0
            restocked = int(state in ("refunded", "received") and rng.random() < 0.7)
            _add(rows, "returns", item, requested, reason, state, refund, restocked)
        if status == "delivered" and rng.random() < 0.25:
            rating = rng.choices([1, 2, 3, 4, 5], [5, 7, 13, 35, 40])[0]
            written = min(day + timedelta(days=rng.randrange(4, 40)), TODAY).isoformat()
            _add(
                rows,
                "reviews",
                pid,
                cid,
                rating,
                _REVIEW_TITLES[rating - 1],
                written,
                int(rng.random() < 0.9),
            )
    if status != "placed":
        method = rng.choices(["card", "paypal", "alipay", "bank_transfer"], [60, 20, 12, 8])[0]
        paid = "refunded" if status == "cancelled" else "captured"
        _add(rows, "payments", oid, method, total, _at(day, rng), paid)
    if status in ("shipped", "delivered"):
        sent = day + timedelta(days=rng.randrange(0, 3))
        arrived = sent + timedelta(days=rng.randrange(1, 7))
        delivered = arrived.isoformat() if status == "delivered" and arrived <= TODAY else None
        carrier = rng.choice(["DHL", "UPS", "SF Express", "PostNL"])
        _add(
            rows,
            "shipments",
            oid,
            rng.randrange(1, len(_WAREHOUSES) + 1),
            carrier,
            f"TRK{oid:08d}",
            min(sent, TODAY).isoformat(),
            delivered,
        )
    if rng.random() < 0.08:
        opened = _at(min(day + timedelta(days=rng.randrange(1, 20)), TODAY), rng)
        topic = rng.choice(["delivery", "payment", "product", "refund"])
        _add(rows, "support_tickets", cid, oid, opened, topic, rng.choice([1, 2, 3, 4, 5, None]))
    _session(rows, rng, day, cid, oid)


def _session(rows: Rows, rng: random.Random, day: date, cid: int | None, oid: int | None) -> None:
    device = rng.choice(["desktop", "mobile", "tablet"])
    source = rng.choice(["search", "ads", "email", "social", "direct"])
    pages = rng.randrange(2, 30) if oid else rng.randrange(1, 12)
    _add(rows, "web_sessions", cid, _at(day, rng), device, source, pages, oid)


def create_database(path: str | Path, *, seed: int = 7) -> Path:
    """Write the shop to a new SQLite file at `path` (which must not exist) and return it."""
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"{target} exists; give a new path, or delete it first")
    rng = random.Random(seed)
    rows: Rows = {t.name: [] for t in TABLES}
    prices = _catalogue(rows, rng)
    _customers(rows, rng)
    for _ in range(_ORDERS):
        _order(rows, rng, prices)
    for _ in range(2 * _ORDERS):  # visits that bought nothing
        anonymous = rng.random() < 0.7
        cid = None if anonymous else rng.randrange(1, _CUSTOMERS + 1)
        _session(rows, rng, _day(_FIRST_DAY, rng, 365), cid, None)
    conn = sqlite3.connect(target)
    try:
        for table in TABLES:
            conn.execute(table.ddl())
            marks = ", ".join("?" * len(table.columns))
            conn.executemany(f"INSERT INTO {table.name} VALUES ({marks})", rows[table.name])
        conn.commit()
    finally:
        conn.close()
    return target
