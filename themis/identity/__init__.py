"""Who a process is towards Hadoop: the user's name, Kerberos ticket or the app's delegation
tokens (:mod:`.http`, :mod:`.tokens`). Shared by the client, the app master, the job runners
and the bundled job's checkpoint store, all of which reach HDFS or the RM as the app's user.
"""
