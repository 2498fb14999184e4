"""Study loading: decode DICOM/PNG/JPG into display pixels and read public CXR dataset layouts.

Works on plain data only (dataclasses, numpy arrays); knows nothing of the database or the UI.
"""
