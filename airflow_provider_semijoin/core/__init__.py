"""The join engine: pure Python + numpy + pyarrow (no Airflow, no Spark imports).

``stores`` holds the disk-based relation R, ``joins`` the algorithms of the papers behind one
engine contract, ``runner`` drives an algorithm over a stream and materialises its output.
"""
