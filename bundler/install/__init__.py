"""Operations on an install: import planning, transaction, journal, undo, doctor."""
