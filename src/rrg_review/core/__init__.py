"""The lowest layer: the domain vocabulary, file writing and small shared types that every other
package (studies, db, model, metrics, app) may import. It imports nothing of the project."""
