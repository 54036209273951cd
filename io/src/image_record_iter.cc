// placeholder: ImageRecordIter (issue 5)
