"""The versioned task catalog: public task cards, platform-held labels, forecast requests."""
