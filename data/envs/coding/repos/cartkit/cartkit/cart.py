"""The cart: SKU -> price and quantity."""


class Cart:
    """Items with their unit price (cents) and quantity."""

    def __init__(self):
        self.items = {}

    def add(self, sku, price_cents, qty=1):
        """Adds qty > 0 units; a known SKU keeps its first price."""
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if sku in self.items:
            self.items[sku][1] += qty
        else:
            self.items[sku] = [price_cents, qty]

    def remove(self, sku, qty=1):
        """Removes qty units; the SKU disappears at zero."""
        if sku not in self.items:
            raise KeyError(sku)
        self.items[sku][1] -= qty
        if self.items[sku][1] <= 0:
            del self.items[sku]

    def quantity(self, sku):
        """Units of one SKU (0 when absent)."""
        if sku not in self.items:
            return 0
        return self.items[sku][1]

    def count(self):
        """Units over all SKUs."""
        return sum(qty for _, qty in self.items.values())

    def subtotal(self):
        """Sum of price times quantity, in cents."""
        total = 0
        for price, qty in self.items.values():
            total += price * qty
        return total
