CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL,
  country TEXT NOT NULL,
  created_at TEXT NOT NULL
);
INSERT INTO customers VALUES
 (1,'Lena Hoffmann','lena.hoffmann@posteo.de','DE','2023-02-11'),
 (2,'Tomás Ferreira','tferreira@sapo.pt','PT','2023-02-19'),
 (3,'Claire Dubois','claire.dubois@orange.fr','FR','2023-03-04'),
 (4,'Jonas Becker','j.becker@web.de','DE','2023-03-22'),
 (5,'Aoife Byrne','aoife.byrne@eircom.net','IE','2023-04-01'),
 (6,'Markus Vogel','markus@vogel-design.de','DE','2023-05-17'),
 (7,'Sofia Romano','sofia.romano@libero.it','IT','2023-06-02'),
 (8,'Pieter de Vries','pieter.devries@ziggo.nl','NL','2023-06-30'),
 (9,'Anna Schmidt','anna.schmidt@gmx.de','DE','2023-08-12'),
 (10,'Erik Lindqvist','erik.l@telia.se','SE','2023-09-09'),
 (11,'Katrin Müller','katrin.mueller@t-online.de','DE','2023-10-21'),
 (12,'Hugo Martin','hugo.martin@free.fr','FR','2023-11-05'),
 (13,'Felix Brandt','felix.brandt@mailbox.org','DE','2024-01-14'),
 (14,'Nora Keller','nora.keller@bluewin.ch','CH','2024-02-02');
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  placed_at TEXT NOT NULL,
  total REAL NOT NULL,
  status TEXT NOT NULL
);
INSERT INTO orders VALUES
 (1001,1,'2024-03-02',54.90,'shipped'),
 (1002,3,'2024-03-02',129.00,'shipped'),
 (1003,4,'2024-03-05',18.50,'cancelled'),
 (1004,9,'2024-03-07',240.10,'shipped'),
 (1005,2,'2024-03-09',75.00,'refunded'),
 (1006,13,'2024-03-11',33.30,'pending'),
 (1007,6,'2024-03-12',410.00,'shipped'),
 (1008,11,'2024-03-15',12.99,'shipped');
