"""Discounts, tax and totals, all in integer cents."""


def apply_discount(amount, percent):
    """amount minus percent % of it (the discount rounds down)."""
    if percent < 0 or percent > 100:
        raise ValueError("percent must be in 0..100")
    return amount - amount * percent // 100


def bulk_discount(units):
    """Percent off for large orders: 5 % from 10 units, 15 % from 100."""
    if units >= 100:
        return 15
    if units >= 10:
        return 5
    return 0


def tax(amount, rate_percent):
    """Tax on amount, rounded half up to a cent."""
    return (amount * rate_percent + 50) // 100


def total(cart, tax_rate=0, coupon=0):
    """Subtotal, less the bulk discount, less the coupon (never below 0), plus tax."""
    amount = cart.subtotal()
    amount = apply_discount(amount, bulk_discount(cart.count()))
    amount = max(0, amount - coupon)
    return amount + tax(amount, tax_rate)


def format_cents(cents):
    """1234 -> '$12.34', -5 -> '-$0.05'."""
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}${cents // 100}.{cents % 100:02d}"
